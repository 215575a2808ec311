/* One row's element-wise steps of a decoder layer, shared by the batched kernels (row_ops.c) and the batch-1 stack
 * (llama_decode_row.c).
 */
#pragma once
#include <math.h>

#include "vector.h"

/* y = s / rms(s) * w for a row of n floats, where s = x + dx (stored in sum) or, with dx NULL, s = x (sum unused; it
 * may be x itself). */
static inline void add_rms_norm_row(const float* x, const float* dx, float* sum, const float* w, float* y, int64_t n,
                                    float eps) {
  const __mmask16 tail = lanes(n % 16);
  const int64_t body = n - n % 16;
  const float* s = dx ? sum : x;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < body; j += 16) {
    __m512 v = _mm512_loadu_ps(x + j);
    if (dx) {
      v = _mm512_add_ps(v, _mm512_loadu_ps(dx + j));
      _mm512_storeu_ps(sum + j, v);
    }
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  if (tail) {
    __m512 v = _mm512_maskz_loadu_ps(tail, x + body);
    if (dx) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(tail, dx + body));
      _mm512_mask_storeu_ps(sum + body, tail, v);
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

/* `heads` heads of head_dim floats at x rotated in place, HF's rotate-half: x1 * cos - x2 * sin | x2 * cos + x1 * sin,
 * with cos / sin [head_dim] at the row's position. */
static inline void rotate_half_heads(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t hd = 0; hd < heads; ++hd) {
    float* v = x + hd * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

/* y[0 .. n) = SiLU(g) * u for the first n (<= 16) floats. */
static inline void silu_mul_16(const float* g, const float* u, float* y, int64_t n) {
  const __mmask16 mask = lanes(n);
  const __m512 gv = _mm512_maskz_loadu_ps(mask, g);
  const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
  _mm512_mask_storeu_ps(y, mask, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(mask, u)));
}
