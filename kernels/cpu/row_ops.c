/* The element-wise steps of a decoder layer over a batch's rows, each one call where torch takes several ops (and
 * as many passes over the rows): residual add + RMSNorm, rotate-half RoPE in place, SiLU(gate) * up. fp32, rows
 * split over OpenMP threads once there is enough work to split.
 */
#include <omp.h>

#include "oxygen_kernels.h"
#include "row_ops.h"

#define SPLIT_FLOATS 65536 /* below this, one thread: a parallel region costs more than the work */

/* sum = h[r] + delta[r] and out[r] = sum / rms(sum) * w, for rows of n floats; with delta NULL, sum is not written
 * (it would be h) and out[r] = h[r] / rms(h[r]) * w. */
void add_rms_norm_f32(const float* h, const float* delta, float* sum, const float* w, float* out, int64_t rows,
                      int64_t n, float eps, int threads) {
  #pragma omp parallel for schedule(static) num_threads(threads) if (rows * n >= SPLIT_FLOATS)
  for (int64_t r = 0; r < rows; ++r)
    add_rms_norm_row(h + r * n, delta ? delta + r * n : NULL, delta ? sum + r * n : NULL, w, out + r * n, n, eps);
}

/* The first `heads` heads of each row of x (rows row_stride floats apart, heads head_dim floats) rotated in place,
 * HF's rotate-half, with cos / sin [rows, head_dim]. */
void rotate_half_f32(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, const float* cos,
                     const float* sin, int threads) {
  #pragma omp parallel for schedule(static) num_threads(threads) if (rows * heads * head_dim >= SPLIT_FLOATS)
  for (int64_t r = 0; r < rows; ++r)
    rotate_half_heads(x + r * row_stride, heads, head_dim, cos + r * head_dim, sin + r * head_dim);
}

/* out[r] = SiLU(gate_up[r][:inter]) * gate_up[r][inter:]. */
void silu_mul_f32(const float* gate_up, float* out, int64_t rows, int64_t inter, int threads) {
  #pragma omp parallel for schedule(static) num_threads(threads) if (rows * inter >= SPLIT_FLOATS)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    for (int64_t j = 0; j < inter; j += 16) silu_mul_16(g + j, g + inter + j, out + r * inter + j, inter - j);
  }
}
