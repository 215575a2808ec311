/* The element-wise steps of a decoder layer over a batch's rows, each one call where torch takes several ops (and
 * as many passes over the rows): residual add + RMSNorm, rotate-half RoPE in place, SiLU(gate) * up. fp32, rows
 * split over OpenMP threads once there is enough work to split.
 */
#include <math.h>
#include <omp.h>

#include "vector.h"

#define SPLIT_FLOATS 65536 /* below this, one thread: a parallel region costs more than the work */

/* sum = h[r] + delta[r] and out[r] = sum / rms(sum) * w, for rows of n floats; with delta NULL, sum is not written
 * (it would be h) and out[r] = h[r] / rms(h[r]) * w. */
void add_rms_norm_f32(const float* h, const float* delta, float* sum, const float* w, float* out, int64_t rows,
                      int64_t n, float eps, int threads) {
  const __mmask16 tail = lanes(n % 16);
  const int64_t body = n - n % 16;
  #pragma omp parallel for schedule(static) num_threads(threads) if (rows * n >= SPLIT_FLOATS)
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = h + r * n, *dx = delta ? delta + r * n : NULL;
    float* y = out + r * n;
    const float* s = dx ? sum + r * n : x;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < body; j += 16) {
      __m512 v = _mm512_loadu_ps(x + j);
      if (dx) {
        v = _mm512_add_ps(v, _mm512_loadu_ps(dx + j));
        _mm512_storeu_ps(sum + r * n + j, v);
      }
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    if (tail) {
      __m512 v = _mm512_maskz_loadu_ps(tail, x + body);
      if (dx) {
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(tail, dx + body));
        _mm512_mask_storeu_ps(sum + r * n + body, tail, v);
      }
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(acc) / (float)n + eps));
    for (int64_t j = 0; j < body; j += 16)
      _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(s + j), inv), _mm512_loadu_ps(w + j)));
    if (tail)
      _mm512_mask_storeu_ps(y + body, tail, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + body), inv),
                                                          _mm512_maskz_loadu_ps(tail, w + body)));
  }
}

/* The first `heads` heads of each row of x (rows row_stride floats apart, heads head_dim floats) rotated in place,
 * HF's rotate-half: x1 * cos - x2 * sin | x2 * cos + x1 * sin, with cos / sin [rows, head_dim]. */
void rotate_half_f32(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, const float* cos,
                     const float* sin, int threads) {
  const int64_t half = head_dim / 2;
  #pragma omp parallel for schedule(static) num_threads(threads) if (rows * heads * head_dim >= SPLIT_FLOATS)
  for (int64_t r = 0; r < rows; ++r) {
    const float *c = cos + r * head_dim, *s = sin + r * head_dim;
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* v = x + r * row_stride + hd * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
}

/* out[r] = SiLU(gate_up[r][:inter]) * gate_up[r][inter:]. */
void silu_mul_f32(const float* gate_up, float* out, int64_t rows, int64_t inter, int threads) {
  #pragma omp parallel for schedule(static) num_threads(threads) if (rows * inter >= SPLIT_FLOATS)
  for (int64_t r = 0; r < rows; ++r) {
    const float *g = gate_up + r * 2 * inter, *u = g + inter;
    float* y = out + r * inter;
    for (int64_t j = 0; j < inter; j += 16) {
      const __mmask16 mask = inter - j >= 16 ? (__mmask16)0xFFFF : lanes(inter - j);
      const __m512 gv = _mm512_maskz_loadu_ps(mask, g + j);
      const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv));
      const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
      _mm512_mask_storeu_ps(y + j, mask, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(mask, u + j)));
    }
  }
}
