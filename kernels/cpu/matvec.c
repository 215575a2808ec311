/* y = W x for W [n, k] row-major (fp32, or bf16 when weight_bf16 is set) and fp32 x [k]: a one-row product (the LM
 * head of a decode token, or any packed layer's single row), streamed. Rows are split over OpenMP threads in
 * contiguous ranges of eight-row blocks.
 */
#include <omp.h>

#include "vector.h"

void matvec(const void* w, int weight_bf16, const float* x, float* y, int64_t n, int64_t k, int threads) {
  const int64_t blocks = matvec_blocks(n);
  if (weight_bf16) {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; ++b) matvec_block(w, 1, x, y, n, k, b);
  } else {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; ++b) matvec_block(w, 0, x, y, n, k, b);
  }
}
