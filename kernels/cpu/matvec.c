/* y = W x for W [n, k] row-major (fp32, or bf16 when weight_bf16 is set) and fp32 x [k]: a one-row product (the LM
 * head of a decode token, or any packed layer's single row), streamed. Rows are split over OpenMP threads in
 * contiguous ranges of eight-row blocks.
 */
#include <omp.h>

#include "vector.h"

void matvec(const void* w, int weight_bf16, const float* x, float* y, int64_t n, int64_t k, int threads) {
  #pragma omp parallel num_threads(threads)
  matvec_for(w, weight_bf16, x, y, n, k);
}
