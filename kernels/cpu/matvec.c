/* y = W x for fp32 W [n, k] row-major and x [k]: a one-row product (the LM head of a decode token, or any packed
 * layer's single row), streamed. Rows are split over OpenMP threads in contiguous ranges of eight-row blocks.
 */
#include <omp.h>

#include "vector.h"

void matvec_f32(const float* w, const float* x, float* y, int64_t n, int64_t k, int threads) {
  const int64_t blocks = matvec_blocks(n);
  #pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b) matvec_block(w, x, y, n, k, b);
}
