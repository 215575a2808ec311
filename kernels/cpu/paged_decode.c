/* Decode attention of a batch, one query per sequence and head, over each sequence's paged context, read in place:
 * the CPU's decode attention for fp32 pools.
 *
 * Each (sequence, kv head) pair is one item of an OpenMP loop (its query heads read each K/V row once), ordered kv
 * head by kv head so a thread's items read the same kv head's blocks: blocks that several sequences share (the
 * observation every task reads) are then read from cache, not memory, by all of them, which is what shared-prefix
 * attention buys in torch without the gather and merge. Block mass (summed over heads) is credited from the exact normalized weights.
 */
#include <omp.h>

#include "attention.h"

typedef struct {
  const float* q;         /* [seqs, heads, head_dim] */
  const float *k, *v;     /* the layer's pool view [units, block_size, kv_heads, head_dim] */
  const int64_t* tables;  /* [seqs, width] */
  const int64_t* lengths; /* [seqs] */
  float* out;             /* [seqs, heads, head_dim] */
  float* block_mass;      /* [seqs, width] or NULL */
  float* scratch;         /* paged_decode_scratch floats */
  int64_t seqs, heads, kv_heads, head_dim, block_size, width, max_length;
  float scale;
} PagedDecode;

int64_t paged_decode_scratch(const PagedDecode* a) { return a->seqs * a->heads * padded16(a->max_length); }

void paged_decode_f32(const PagedDecode* a, int threads) {
  const int64_t group = a->heads / a->kv_heads, cap = padded16(a->max_length), d = a->head_dim;
  const int64_t items = a->seqs * a->kv_heads;
  #pragma omp parallel num_threads(threads)
  {
    #pragma omp for schedule(static)
    for (int64_t i = 0; i < items; ++i) {
      const int64_t kv_head = i / a->seqs, seq = i % a->seqs, row = seq * a->heads + kv_head * group;
      const PagedContext context = {a->k, a->v, a->tables + seq * a->width, a->lengths[seq], a->block_size,
                                    a->kv_heads, d};
      attend_heads(&context, kv_head, a->q + row * d, group, a->scale, a->scratch + row * cap, cap, a->out + row * d);
    }
    if (a->block_mass) {
      #pragma omp for schedule(static)
      for (int64_t seq = 0; seq < a->seqs; ++seq) {
        const int64_t blocks = (a->lengths[seq] + a->block_size - 1) / a->block_size;
        for (int64_t b = 0; b < blocks; ++b)
          credit_blocks(a->scratch + seq * a->heads * cap, a->heads, cap, a->lengths[seq], a->block_size,
                        a->block_mass + seq * a->width, b);
      }
    }
  }
}
