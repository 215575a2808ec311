/* Attention of many queries over one shared prefix of paged K/V, as matrix products: the CPU decode path for the
 * blocks several sequences share (the observation every task asks about).
 *
 * A row-by-row dot product spends most of its time reducing each score across a vector. Here the prefix's K is first
 * transposed (per kv head, 16 tokens per chunk: kt[chunk][dim][16]), so a tile of queries computes 16 scores per
 * fused multiply-add with no reduction, and then multiplies the weights into V the same way: the work becomes what
 * the arithmetic is, each K/V row read once per tile of queries. Two passes (scores, then weights and values) give
 * an exact softmax; the unnormalized weights stay in each query's probs row for the block mass.
 */
#pragma once
#include "attention.h"

#define PREFIX_MAX_Q 6    /* queries per tile, at most */
#define PREFIX_WIDE_Q 6   /* queries per tile for head_dim <= 64 */
#define PREFIX_NARROW_Q 2 /* for head_dim 80 .. 128 */

typedef struct { /* a prefix: `tokens` tokens in the blocks `table` of a pool view */
  const float *k, *v;
  const int64_t* table;
  int64_t tokens, block_size, kv_heads, head_dim;
} SharedPrefixView;

static inline int64_t prefix_chunks(int64_t tokens) { return (tokens + 15) / 16; }

static inline const float* prefix_row(const SharedPrefixView* p, const float* cache, int64_t t, int64_t kv_head) {
  return cache + ((p->table[t / p->block_size] * p->block_size + t % p->block_size) * p->kv_heads + kv_head) *
                     p->head_dim;
}

/* kt[dim][16] of chunk `chunk` of kv head `kv_head` (tokens past the prefix: zeros). A full chunk inside one block
 * (its 16 rows evenly spaced) is read by 16-lane gathers, one per dimension; anything else row by row. */
static void transpose_chunk(const SharedPrefixView* p, int64_t kv_head, int64_t chunk, float* kt) {
  const int64_t d = p->head_dim, t0 = chunk * 16;
  if (t0 + 16 <= p->tokens && p->block_size % 16 == 0) {
    const float* first = prefix_row(p, p->k, t0, kv_head);
    for (int64_t j = 0; j < d; ++j) vf_storeu(kt + j * 16, vf_gather(first + j, p->kv_heads * d));
    return;
  }
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t t = t0 + i;
    const float* k = t < p->tokens ? prefix_row(p, p->k, t, kv_head) : NULL;
    for (int64_t j = 0; j < d; ++j) kt[j * 16 + i] = k ? k[j] : 0.0f;
  }
}

/* Q queries (pointers q[i], head_dim = 16 V floats) over the prefix of kv head `kv_head` (kt: its transposed chunks):
 * out[i] (16 V floats) = softmax(q K^T * scale) V, lse[i] its log-sum-exp, probs[i][0 .. tokens) the weights
 * (normalized if `normalize`, else exp(score - max)). V and Q are compile-time constants (prefix_tiles dispatches);
 * the arrays are sized by their bounds, not by V and Q: gcc keeps a fixed-size array's elements in registers, a
 * variable-length one in memory (every accumulation a load and a store). */
static inline __attribute__((always_inline)) void prefix_tile(const SharedPrefixView* p, int64_t kv_head,
                                                               const float* kt, const float* const* q, float scale,
                                                               float* const* probs, float* const* out, float* lse,
                                                               int normalize, const int V, const int Q) {
  const int64_t d = 16 * V, chunks = prefix_chunks(p->tokens);
  vf top[PREFIX_MAX_Q];
  for (int i = 0; i < Q; ++i) top[i] = vf_set1(-INFINITY);
  for (int64_t c = 0; c < chunks; ++c) {
    const float* block = kt + c * d * 16;
    vf s[PREFIX_MAX_Q];
    for (int i = 0; i < Q; ++i) s[i] = vf_zero();
    for (int64_t j = 0; j < d; ++j) {
      const vf column = vf_loadu(block + j * 16);
      for (int i = 0; i < Q; ++i) s[i] = vf_fmadd(vf_set1(q[i][j]), column, s[i]);
    }
    const int64_t left = p->tokens - c * 16;
    for (int i = 0; i < Q; ++i) {
      const vf scaled = vf_mul(s[i], vf_set1(scale));
      vf_store_n(probs[i] + c * 16, scaled, left);
      top[i] = vf_max_n(top[i], scaled, left);
    }
  }
  float shift[PREFIX_MAX_Q];
  vf acc[PREFIX_MAX_Q][MAX_V];
  for (int i = 0; i < Q; ++i) {
    shift[i] = vf_reduce_max(top[i]);
    for (int j = 0; j < V; ++j) acc[i][j] = vf_zero();
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t left = p->tokens - c * 16, n = left >= 16 ? 16 : left;
    for (int i = 0; i < Q; ++i)
      vf_store_n(probs[i] + c * 16, vf_exp(vf_sub(vf_load_n(probs[i] + c * 16, n), vf_set1(shift[i]))), n);
    const float* row = prefix_row(p, p->v, c * 16, kv_head);
    int64_t offset = c * 16 % p->block_size; /* within the block: its next token is a row further, until it ends */
    for (int64_t t = 0; t < n; ++t, ++offset, row += p->kv_heads * d) {
      if (offset == p->block_size) {
        row = prefix_row(p, p->v, c * 16 + t, kv_head);
        offset = 0;
      }
      vf values[MAX_V];
      for (int j = 0; j < V; ++j) values[j] = vf_loadu(row + 16 * j);
      for (int i = 0; i < Q; ++i) {
        const vf w = vf_set1(probs[i][c * 16 + t]);
        for (int j = 0; j < V; ++j) acc[i][j] = vf_fmadd(w, values[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < Q; ++i) { /* the sum of the weights, read back: no accumulators live across the loop above */
    vf total = vf_zero();
    for (int64_t t = 0; t < p->tokens; t += 16) total = vf_add(total, vf_load_n(probs[i] + t, p->tokens - t));
    const float sum = vf_reduce_add(total);
    const vf inv = vf_set1(1.0f / sum);
    for (int j = 0; j < V; ++j) vf_storeu(out[i] + 16 * j, vf_mul(acc[i][j], inv));
    lse[i] = shift[i] + logf(sum);
    for (int64_t t = 0; normalize && t < p->tokens; t += 16)
      vf_store_n(probs[i] + t, vf_mul(vf_load_n(probs[i] + t, p->tokens - t), inv), p->tokens - t);
  }
}

#define PREFIX_Q(V, Q) prefix_tile(p, kv_head, kt, q + i, scale, probs + i, out + i, lse + i, normalize, V, Q)
#define PREFIX_V(V, Q)                                   \
  case V:                                                \
    for (; count - i >= Q; i += Q) PREFIX_Q(V, Q);       \
    for (; i < count; ++i) PREFIX_Q(V, 1);               \
    break;

/* `count` queries over the prefix, in tiles that keep their accumulators in registers. */
static void prefix_tiles(const SharedPrefixView* p, int64_t kv_head, const float* kt, const float* const* q,
                         int64_t count, float scale, float* const* probs, float* const* out, float* lse,
                         int normalize) {
  int64_t i = 0;
  switch (p->head_dim / 16) {
    PREFIX_V(1, PREFIX_WIDE_Q) PREFIX_V(2, PREFIX_WIDE_Q) PREFIX_V(3, PREFIX_WIDE_Q) PREFIX_V(4, PREFIX_WIDE_Q)
    PREFIX_V(5, PREFIX_NARROW_Q) PREFIX_V(6, PREFIX_NARROW_Q) PREFIX_V(7, PREFIX_NARROW_Q) PREFIX_V(8, PREFIX_NARROW_Q)
    default:
      for (; i < count; ++i) switch (p->head_dim / 16) {
        case 9: PREFIX_Q(9, 1); break;   case 10: PREFIX_Q(10, 1); break; case 11: PREFIX_Q(11, 1); break;
        case 12: PREFIX_Q(12, 1); break; case 13: PREFIX_Q(13, 1); break; case 14: PREFIX_Q(14, 1); break;
        case 15: PREFIX_Q(15, 1); break; default: PREFIX_Q(16, 1); break;
      }
  }
}
