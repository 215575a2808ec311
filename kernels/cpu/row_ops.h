/* One row's element-wise steps of a decoder layer, shared by the batched kernels (row_ops.c) and the one-call stack
 * (llama_decode_row.c).
 */
#pragma once
#include <math.h>

#include "vector.h"

/* y = s / rms(s) * w for a row of n floats, where s = x + dx (stored in sum) or, with dx NULL, s = x (sum unused; it
 * may be x itself). */
static inline void add_rms_norm_row(const float* x, const float* dx, float* sum, const float* w, float* y, int64_t n,
                                    float eps) {
  const int64_t tail = n % 16, body = n - tail;
  const float* s = dx ? sum : x;
  vf acc = vf_zero();
  for (int64_t j = 0; j < body; j += 16) {
    vf v = vf_loadu(x + j);
    if (dx) {
      v = vf_add(v, vf_loadu(dx + j));
      vf_storeu(sum + j, v);
    }
    acc = vf_fmadd(v, v, acc);
  }
  if (tail) {
    vf v = vf_load_n(x + body, tail);
    if (dx) {
      v = vf_add(v, vf_load_n(dx + body, tail));
      vf_store_n(sum + body, v, tail);
    }
    acc = vf_fmadd(v, v, acc);
  }
  const vf inv = vf_set1(1.0f / sqrtf(vf_reduce_add(acc) / (float)n + eps));
  for (int64_t j = 0; j < body; j += 16) vf_storeu(y + j, vf_mul(vf_mul(vf_loadu(s + j), inv), vf_loadu(w + j)));
  if (tail)
    vf_store_n(y + body, vf_mul(vf_mul(vf_load_n(s + body, tail), inv), vf_load_n(w + body, tail)), tail);
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
  const vf gv = vf_load_n(g, n);
  const vf silu = vf_div(gv, vf_add(vf_set1(1.0f), vf_exp(vf_sub(vf_zero(), gv))));
  vf_store_n(y, vf_mul(silu, vf_load_n(u, n)), n);
}

/* y[0 .. n) = GELU_tanh(g) * u for the first n (<= 16) floats: 0.5 g (1 + tanh(z)), z = sqrt(2 / pi) (g + 0.044715
 * g^3), as torch's gelu(approximate="tanh"), computed as g / (1 + e^-2z) (the same function, with no cancellation
 * where tanh(z) nears -1; exp's clamp keeps it finite far out: g, or -0, there). */
static inline void gelu_tanh_mul_16(const float* g, const float* u, float* y, int64_t n) {
  const vf gv = vf_load_n(g, n);
  const vf z = vf_mul(vf_set1(0.7978845608028654f), vf_fmadd(vf_mul(vf_set1(0.044715f), gv), vf_mul(gv, gv), gv));
  const vf gelu = vf_div(gv, vf_add(vf_set1(1.0f), vf_exp(vf_mul(vf_set1(-2.0f), z))));
  vf_store_n(y, vf_mul(gelu, vf_load_n(u, n)), n);
}
