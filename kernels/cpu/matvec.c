/* y = x W^T for W [n, k] row-major (WEIGHTS_F32, _BF16, _I8 with fp32 group scales, or _Q4_1 blocks) and m fp32
 * input rows x [m, k], m from 1 to STREAMED_MAX_INPUTS: the products of a decode step of a few sequences (the LM head
 * of a decode step, any packed layer given up to eight rows), one pass over the weights. Rows of W are split over OpenMP threads in
 * contiguous ranges of eight-row blocks.
 */
#include <omp.h>

#include "oxygen_kernels.h"
#include "vector.h"

void matvec(const void* w, int weight_format, const float* scales, const float* x, float* y, int64_t m, int64_t n,
            int64_t k, int threads) {
  #pragma omp parallel num_threads(threads)
  matvec_for(w, weight_format, scales, x, y, m, n, k);
}
