/* Decode attention of a batch, one query per sequence and head, over each sequence's paged context, read in place:
 * the CPU's decode attention for fp32 and int8 pools.
 *
 * Sequences that share leading blocks (a group: the observation every task asks about) have those blocks attended by
 * all their queries at once as matrix products (shared_prefix.h); then each sequence's own blocks (its suffix) by
 * dot products, three query heads of a kv head per K/V row read (attention.h); the two parts merge exactly by their
 * log-sum-exp. A sequence in no group is one pass of dot products over its whole context. The work is split over
 * OpenMP threads by (kv head, tile of queries) for prefixes and by (sequence, kv head) for the rest. Block mass
 * (summed over heads) is credited from the exact normalized weights. An int8 pool's rows read their codes and scales
 * in place by dot products over their whole context (its prefix groups are not read: their transposed tiles are
 * fp32).
 */
#include <omp.h>

#include "oxygen_kernels.h"
#include "shared_prefix.h"

#define TILE 6 /* queries per prefix work item */
_Static_assert(TILE <= PREFIX_MAX_Q, "a work item is one tile");
_Static_assert(PREFIX_WIDE_Q <= PREFIX_MAX_Q && PREFIX_NARROW_Q <= PREFIX_MAX_Q, "tiles fit their arrays");

/* the prefix groups this call attends as groups */
static int64_t groups_of(const PagedDecode* a) { return a->kv_format == KV_F32 ? a->groups : 0; }

static int64_t transposed_floats(const PagedDecode* a) {
  int64_t n = 0;
  for (int64_t g = 0; g < groups_of(a); ++g) n += a->kv_heads * prefix_chunks(a->group_blocks[g] * a->block_size) * 16;
  return n * a->head_dim;
}

int64_t paged_decode_scratch(const PagedDecode* a) {
  const int64_t queries = a->seqs * a->heads;
  /* weights per query and position | prefix outputs | prefix and suffix log-sum-exps | shared blocks per row | kt */
  return queries * padded16(a->max_length) + queries * a->head_dim + 2 * queries + a->seqs + transposed_floats(a);
}

static SharedPrefixView prefix_of(const PagedDecode* a, int64_t g) {
  const int64_t leader = a->group_rows[a->group_starts[g]];
  return (SharedPrefixView){(const float*)a->k, (const float*)a->v, a->tables + leader * a->width,
                            a->group_blocks[g] * a->block_size, a->block_size, a->kv_heads, a->head_dim};
}

void paged_decode(const PagedDecode* a, int threads) {
  const int64_t group = a->heads / a->kv_heads, cap = padded16(a->max_length), d = a->head_dim, H = a->heads;
  const int64_t groups = groups_of(a);
  const int64_t queries = a->seqs * H;
  float *probs = a->scratch, *prefix_out = probs + queries * cap, *prefix_lse = prefix_out + queries * d;
  float *suffix_lse = prefix_lse + queries, *shared = suffix_lse + queries, *kt = shared + a->seqs;
  for (int64_t r = 0; r < a->seqs; ++r) shared[r] = 0.0f;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = a->group_starts[g]; i < a->group_starts[g + 1]; ++i)
      shared[a->group_rows[i]] = (float)a->group_blocks[g];
  #pragma omp parallel num_threads(threads)
  {
    float* g_kt = kt;
    for (int64_t g = 0; g < groups; ++g) { /* 1. each group's prefix K, transposed: (kv head, chunk) items */
      const SharedPrefixView p = prefix_of(a, g);
      const int64_t chunks = prefix_chunks(p.tokens);
      #pragma omp for schedule(static)
      for (int64_t item = 0; item < a->kv_heads * chunks; ++item)
        transpose_chunk(&p, item / chunks, item % chunks, g_kt + item * d * 16);
      g_kt += a->kv_heads * chunks * d * 16;
    }
    g_kt = kt;
    for (int64_t g = 0; g < groups; ++g) { /* 2. its queries over it, by (kv head, tile of queries) */
      const SharedPrefixView p = prefix_of(a, g);
      const int64_t chunks = prefix_chunks(p.tokens), rows = a->group_starts[g + 1] - a->group_starts[g];
      const int64_t per_head = rows * group, tiles = (per_head + TILE - 1) / TILE;
      #pragma omp for schedule(static)
      for (int64_t item = 0; item < a->kv_heads * tiles; ++item) {
        const int64_t kv_head = item / tiles, first = item % tiles * TILE;
        const int64_t count = per_head - first < TILE ? per_head - first : TILE;
        const float* q[TILE];
        float *rows_probs[TILE], *outs[TILE], lse[TILE];
        int64_t index[TILE];
        for (int64_t i = 0; i < count; ++i) {
          const int64_t row = a->group_rows[a->group_starts[g] + (first + i) / group];
          index[i] = row * H + kv_head * group + (first + i) % group;
          q[i] = a->q + index[i] * d;
          rows_probs[i] = probs + index[i] * cap;
          outs[i] = prefix_out + index[i] * d;
        }
        prefix_tiles(&p, kv_head, g_kt + kv_head * chunks * d * 16, q, count, a->scale, rows_probs, outs, lse,
                     a->block_mass != NULL);
        for (int64_t i = 0; i < count; ++i) prefix_lse[index[i]] = lse[i];
      }
      g_kt += a->kv_heads * chunks * d * 16;
    }
    /* 3. every row's own blocks (all of them for a row in no group), merged with its prefix; then its block mass */
    #pragma omp for schedule(static)
    for (int64_t item = 0; item < a->seqs * a->kv_heads; ++item) {
      const int64_t kv_head = item / a->seqs, seq = item % a->seqs, row = seq * H + kv_head * group;
      const int64_t skip = (int64_t)shared[seq], skipped = skip * a->block_size;
      const int i8 = a->kv_format == KV_I8; /* the storage is what kv_format says, whatever else is set */
      const PagedContext context = {a->k, a->v, i8 ? a->k_scale : NULL, i8 ? a->v_scale : NULL,
                                    a->tables + seq * a->width + skip, a->lengths[seq] - skipped, a->block_size,
                                    a->kv_heads, d};
      attend_heads(&context, kv_head, a->q + row * d, group, a->scale, probs + row * cap + skipped, cap,
                   a->out + row * d, suffix_lse + row);
      if (!skip) continue;
      for (int64_t h = row; h < row + group; ++h) { /* exact merge: each part weighted by its share of the mass */
        const float top = prefix_lse[h] > suffix_lse[h] ? prefix_lse[h] : suffix_lse[h];
        const float wp = expf(prefix_lse[h] - top), ws = expf(suffix_lse[h] - top), total = wp + ws;
        const float sp = wp / total, ss = ws / total;
        float *o = a->out + h * d, *po = prefix_out + h * d;
        for (int64_t j = 0; j < d; ++j) o[j] = sp * po[j] + ss * o[j];
        if (a->block_mass) { /* final weights: each part's normalized weights times its share */
          float* w = probs + h * cap;
          for (int64_t t = 0; t < skipped; ++t) w[t] *= sp;
          for (int64_t t = skipped; t < a->lengths[seq]; ++t) w[t] *= ss;
        }
      }
    }
    if (a->block_mass) {
      #pragma omp for schedule(static)
      for (int64_t seq = 0; seq < a->seqs; ++seq) {
        const int64_t blocks = (a->lengths[seq] + a->block_size - 1) / a->block_size;
        for (int64_t b = 0; b < blocks; ++b)
          credit_blocks(probs + seq * H * cap, H, cap, a->lengths[seq], a->block_size,
                        a->block_mass + seq * a->width, b);
      }
    }
  }
}
