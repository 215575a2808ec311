/* Decode attention of one query head over a paged context, read in place: what the CPU decode kernels share.
 *
 * Two passes over the context (scores, then weights times values) with an exact softmax between them, all fp32; the
 * normalized weights stay in `probs`, so a caller can credit each block its attention mass.
 */
#pragma once
#include <math.h>

#include "vector.h"

typedef struct { /* one sequence's context in one layer's pool view [units, block_size, kv_heads, head_dim] */
  const void *k, *v;       /* fp32 rows, or int8 codes when k_scale is set */
  const uint16_t* k_scale; /* int8: bf16 [units, kv_heads, head_dim], a key channel's scale over its unit; or NULL */
  const float* v_scale;    /* int8: [units, block_size, kv_heads], a value row's scale */
  const int64_t* table;    /* the sequence's block ids, in order */
  int64_t length, block_size, kv_heads, head_dim;
} PagedContext;

#define MAX_V 16       /* vectors of 16 floats per head: head_dim <= 256 */
#define ATTEND_MAX_G 3 /* query heads attended together per K/V row */

static inline int64_t padded16(int64_t n) { return (n + 15) / 16 * 16; }

/* 16 elements of a K or V row from element e of the view: fp32, or int8 codes widened exactly */
static inline __attribute__((always_inline)) vf load_row(const void* view, int64_t e, const int I8) {
  return I8 ? vf_load_i8((const int8_t*)view + e) : vf_loadu((const float*)view + e);
}

/* The element where kv head `kv_head`'s row of the first token of unit `unit` starts; the unit's next tokens follow
 * kv_heads * head_dim elements apart. Walking the context unit by unit needs no division per token. */
static inline int64_t unit_start(const PagedContext* c, int64_t unit, int64_t kv_head) {
  return (unit * c->block_size * c->kv_heads + kv_head) * c->head_dim;
}

/* softmax(q_j K^T * scale) V for the G query heads q_j (head_dim = 16 V floats each, consecutive in q) that read
 * kv head `kv_head`: each K and V row is loaded once for all G heads. V, G and I8 (int8 codes) are compile-time
 * constants (see attend_heads) and the arrays are sized by their bounds (a variable-length array would live in
 * memory), so queries and accumulators live in registers. int8: a unit's key scales multiply the queries once per
 * unit (q . (s * k) = (q * s) . k) and a value row's scale its weight. probs + j * stride keeps head j's normalized
 * weights, lse[j] (if lse) the log-sum-exp of its scaled scores. */
static inline __attribute__((always_inline)) void attend_fixed(const PagedContext* c, int64_t kv_head,
                                                                const float* q, float scale, float* probs,
                                                                int64_t stride, float* out, float* lse,
                                                                const int V, const int G, const int I8) {
  const int64_t n = c->length, row_step = c->kv_heads * c->head_dim;
  vf qs[ATTEND_MAX_G][MAX_V], acc[ATTEND_MAX_G][MAX_V]; /* the queries (int8: times the unit's key scales) */
  float top[ATTEND_MAX_G];
  for (int j = 0; j < G; ++j) {
    top[j] = -INFINITY;
    for (int i = 0; i < V; ++i) { qs[j][i] = vf_loadu(q + (j * V + i) * 16); acc[j][i] = vf_zero(); }
  }
  for (int64_t b = 0, t = 0; t < n; ++b) { /* scores, unit by unit */
    const int64_t unit = c->table[b], end = t + c->block_size < n ? t + c->block_size : n;
    if (I8) {
      const uint16_t* s = c->k_scale + (unit * c->kv_heads + kv_head) * c->head_dim;
      for (int i = 0; i < V; ++i) {
        const vf si = vf_load_bf16(s + 16 * i); /* q again from L1: a second copy would outgrow the registers */
        for (int j = 0; j < G; ++j) qs[j][i] = vf_mul(vf_loadu(q + (j * V + i) * 16), si);
      }
    }
    for (int64_t e = unit_start(c, unit, kv_head); t < end; ++t, e += row_step) {
      vf kv[MAX_V];
      for (int i = 0; i < V; ++i) kv[i] = load_row(c->k, e + 16 * i, I8);
      for (int j = 0; j < G; ++j) {
        vf dot = vf_mul(qs[j][0], kv[0]);
        for (int i = 1; i < V; ++i) dot = vf_fmadd(qs[j][i], kv[i], dot);
        const float score = vf_reduce_add(dot) * scale;
        probs[j * stride + t] = score;
        top[j] = score > top[j] ? score : top[j];
      }
    }
  }
  float inv[ATTEND_MAX_G];
  for (int j = 0; j < G; ++j) {
    float* p = probs + j * stride;
    const vf shift = vf_set1(top[j]);
    vf total = vf_zero();
    for (int64_t t = 0; t < n; t += 16) {
      const vf e = vf_exp(vf_sub(vf_load_n(p + t, n - t), shift));
      total = vf_add(total, vf_first_n(e, n - t));
      vf_store_n(p + t, e, n - t);
    }
    const float sum = vf_reduce_add(total);
    inv[j] = 1.0f / sum;
    if (lse) lse[j] = top[j] + logf(sum);
  }
  for (int64_t b = 0, t = 0; t < n; ++b) { /* weights times values, unit by unit */
    const int64_t unit = c->table[b], first = t, end = t + c->block_size < n ? t + c->block_size : n;
    const float* row_scale = I8 ? c->v_scale + unit * c->block_size * c->kv_heads + kv_head : NULL;
    for (int64_t e = unit_start(c, unit, kv_head); t < end; ++t, e += row_step) {
      const float value_scale = I8 ? row_scale[(t - first) * c->kv_heads] : 1.0f;
      vf vv[MAX_V];
      for (int i = 0; i < V; ++i) vv[i] = load_row(c->v, e + 16 * i, I8);
      for (int j = 0; j < G; ++j) {
        const vf w = vf_set1((probs[j * stride + t] *= inv[j]) * value_scale);
        for (int i = 0; i < V; ++i) acc[j][i] = vf_fmadd(w, vv[i], acc[j][i]);
      }
    }
  }
  for (int j = 0; j < G; ++j)
    for (int i = 0; i < V; ++i) vf_storeu(out + (j * V + i) * 16, acc[j][i]);
}

#define ATTEND_G(V, G) \
  attend_fixed(c, kv_head, q + h * d, scale, probs + h * stride, stride, out + h * d, lse ? lse + h : NULL, V, G, I8)
#define ATTEND_V(V)                                                                 \
  case V:                                                                           \
    for (; heads - h >= ATTEND_MAX_G; h += ATTEND_MAX_G) ATTEND_G(V, ATTEND_MAX_G); \
    for (; h < heads; ++h) ATTEND_G(V, 1);                                          \
    break;

static inline __attribute__((always_inline)) void attend_heads_of(const PagedContext* c, int64_t kv_head,
                                                                   const float* q, int64_t heads, float scale,
                                                                   float* probs, int64_t stride, float* out,
                                                                   float* lse, const int I8) {
  const int64_t d = c->head_dim;
  int64_t h = 0;
  switch (d / 16) {
    ATTEND_V(1) ATTEND_V(2) ATTEND_V(3) ATTEND_V(4) ATTEND_V(5) ATTEND_V(6) ATTEND_V(7) ATTEND_V(8)
    default:
      for (; h < heads; ++h) switch (d / 16) {
        case 9: ATTEND_G(9, 1); break;   case 10: ATTEND_G(10, 1); break; case 11: ATTEND_G(11, 1); break;
        case 12: ATTEND_G(12, 1); break; case 13: ATTEND_G(13, 1); break; case 14: ATTEND_G(14, 1); break;
        case 15: ATTEND_G(15, 1); break; default: ATTEND_G(16, 1); break;
      }
  }
}

/* The `heads` query heads at q (consecutive, head_dim = 16 * V floats each; head_dim a multiple of 16, at most 256)
 * that read kv head `kv_head`, three at a time, over fp32 or (k_scale set) int8 storage; lse (NULL or `heads`
 * floats) gets their log-sum-exps. */
static void attend_heads(const PagedContext* c, int64_t kv_head, const float* q, int64_t heads, float scale,
                         float* probs, int64_t stride, float* out, float* lse) {
  if (c->k_scale)
    attend_heads_of(c, kv_head, q, heads, scale, probs, stride, out, lse, 1);
  else
    attend_heads_of(c, kv_head, q, heads, scale, probs, stride, out, lse, 0);
}

/* mass[b] += the weights of block b's tokens, summed over `heads` rows of probs (each `stride` floats apart), 16
 * tokens per vector: a scalar float sum is one dependent add per weight (the compiler may not reorder it). */
static void credit_blocks(const float* probs, int64_t heads, int64_t stride, int64_t length, int64_t block_size,
                          float* mass, int64_t b) {
  const int64_t t0 = b * block_size, t1 = t0 + block_size < length ? t0 + block_size : length;
  vf sum = vf_zero();
  for (int64_t hd = 0; hd < heads; ++hd)
    for (int64_t t = t0; t < t1; t += 16) sum = vf_add(sum, vf_load_n(probs + hd * stride + t, t1 - t));
  mass[b] += vf_reduce_add(sum);
}
