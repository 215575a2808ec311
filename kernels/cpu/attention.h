/* Decode attention of one query head over a paged context, read in place: what the CPU decode kernels share.
 *
 * Two passes over the context (scores, then weights times values) with an exact softmax between them, all fp32; the
 * normalized weights stay in `probs`, so a caller can credit each block its attention mass.
 */
#pragma once
#include <math.h>

#include "vector.h"

typedef struct { /* one sequence's context in one layer's pool view [units, block_size, kv_heads, head_dim] */
  const float *k, *v;
  const int64_t* table; /* the sequence's block ids, in order */
  int64_t length, block_size, kv_heads, head_dim;
} PagedContext;

#define MAX_V 16       /* vectors of 16 floats per head: head_dim <= 256 */
#define ATTEND_MAX_G 3 /* query heads attended together per K/V row */

static inline int64_t padded16(int64_t n) { return (n + 15) / 16 * 16; }

/* The first row of kv head `kv_head` in block entry b of the context's table; the block's next tokens follow
 * kv_heads * head_dim floats apart. Walking the context block by block needs no division per token. */
static inline const float* block_start(const PagedContext* c, const float* cache, int64_t b, int64_t kv_head) {
  return cache + (c->table[b] * c->block_size * c->kv_heads + kv_head) * c->head_dim;
}

/* for each token t of the context, with row pointing at its row of kv head `kv_head` in cache */
#define FOR_EACH_TOKEN(c, cache, kv_head, t, row)                                                        \
  for (int64_t t##_block = 0, t = 0; t < (c)->length; ++t##_block)                                     \
    for (const float *row = block_start((c), (cache), t##_block, (kv_head)),                            \
                     *t##_end = row + (c)->block_size * (c)->kv_heads * (c)->head_dim;                  \
         row < t##_end && t < (c)->length; row += (c)->kv_heads * (c)->head_dim, ++t)

/* softmax(q_j K^T * scale) V for the G query heads q_j (head_dim = 16 V floats each, consecutive in q) that read
 * kv head `kv_head`: each K and V row is loaded once for all G heads. V and G are compile-time constants (see
 * attend_heads) and the arrays are sized by their bounds (a variable-length array would live in memory), so
 * queries and accumulators live in registers. probs + j * stride keeps head j's normalized
 * weights, lse[j] (if lse) the log-sum-exp of its scaled scores. */
static inline __attribute__((always_inline)) void attend_fixed(const PagedContext* c, int64_t kv_head,
                                                                const float* q, float scale, float* probs,
                                                                int64_t stride, float* out, float* lse,
                                                                const int V, const int G) {
  const int64_t n = c->length;
  vf qv[ATTEND_MAX_G][MAX_V], acc[ATTEND_MAX_G][MAX_V];
  float top[ATTEND_MAX_G];
  for (int j = 0; j < G; ++j) {
    top[j] = -INFINITY;
    for (int i = 0; i < V; ++i) { qv[j][i] = vf_loadu(q + (j * V + i) * 16); acc[j][i] = vf_zero(); }
  }
  FOR_EACH_TOKEN(c, c->k, kv_head, t, k) {
    vf kv[MAX_V];
    for (int i = 0; i < V; ++i) kv[i] = vf_loadu(k + 16 * i);
    for (int j = 0; j < G; ++j) {
      vf dot = vf_mul(qv[j][0], kv[0]);
      for (int i = 1; i < V; ++i) dot = vf_fmadd(qv[j][i], kv[i], dot);
      const float score = vf_reduce_add(dot) * scale;
      probs[j * stride + t] = score;
      top[j] = score > top[j] ? score : top[j];
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
  FOR_EACH_TOKEN(c, c->v, kv_head, t, v) {
    vf vv[MAX_V];
    for (int i = 0; i < V; ++i) vv[i] = vf_loadu(v + 16 * i);
    for (int j = 0; j < G; ++j) {
      const vf w = vf_set1(probs[j * stride + t] *= inv[j]);
      for (int i = 0; i < V; ++i) acc[j][i] = vf_fmadd(w, vv[i], acc[j][i]);
    }
  }
  for (int j = 0; j < G; ++j)
    for (int i = 0; i < V; ++i) vf_storeu(out + (j * V + i) * 16, acc[j][i]);
}

#define ATTEND_G(V, G) \
  attend_fixed(c, kv_head, q + h * d, scale, probs + h * stride, stride, out + h * d, lse ? lse + h : NULL, V, G)
#define ATTEND_V(V)                                                                 \
  case V:                                                                           \
    for (; heads - h >= ATTEND_MAX_G; h += ATTEND_MAX_G) ATTEND_G(V, ATTEND_MAX_G); \
    for (; h < heads; ++h) ATTEND_G(V, 1);                                          \
    break;

/* The `heads` query heads at q (consecutive, head_dim = 16 * V floats each; head_dim a multiple of 16, at most 256)
 * that read kv head `kv_head`, three at a time; lse (NULL or `heads` floats) gets their log-sum-exps. */
static void attend_heads(const PagedContext* c, int64_t kv_head, const float* q, int64_t heads, float scale,
                         float* probs, int64_t stride, float* out, float* lse) {
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
