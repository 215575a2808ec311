/* A whole Llama-style decoder stack for the decode tokens of one to STREAMED_MAX_INPUTS sequences, in one call:
 * batch-1 decode on a CPU, and the few rows of a robot's concurrent tasks. The layer of Llama (RMSNorm, rotate-half
 * RoPE, SwiGLU; Qwen2's q/k/v bias) and of Gemma, pi0 / pi0.5's backbone (GeGLU with tanh GELU: RowModel.activation;
 * its RMSNorm's 1 + w is the norm weight the caller passes); another family's layer is a kernel of its own.
 *
 * Done layer by layer in torch, a decode step is ~40 small ops per layer whose dispatch costs as much as reading
 * the weights (SmolLM2-135M: ~14 ms of ops next to ~16 ms of weight reads per token). Here each layer is RMSNorm ->
 * fused q|k|v product (+ bias) -> RoPE (rotate-half) -> K/V stored at each token's pool slot -> attention of each
 * row over its own paged context (GQA; the blocks read in place through its block table) -> o product -> residual ->
 * RMSNorm -> fused gate|up product -> SiLU(gate) * up (or GELU) -> down product -> residual, inside one OpenMP
 * region: the products read the weights once for all rows and split their eight-row blocks over the threads,
 * attention its (row, kv head) pairs, the vector ops their rows.
 * All math is fp32 over an fp32 pool, as in the torch path (bf16 projection weights, when the model stores them so,
 * are widened to fp32 exactly as they are read; int8 ones are read as integers and each group's sum scaled, a single
 * row's input coded to int16 for them (vector.h, code_i16); Q4_1 blocks dequantized as read, d * q + m); the
 * attention mass of each block (summed over heads) is added to the row's block_mass when it is given, as the
 * eviction policy reads it.
 */
#include <omp.h>

#include "attention.h"
#include "oxygen_kernels.h"
#include "row_ops.h"

int64_t decode_rows_scratch(const RowModel* m, int64_t rows, int64_t max_length) {
  const int64_t qkv = (m->heads + 2 * m->kv_heads) * m->head_dim;
  return rows * (2 * m->hidden + qkv + m->heads * m->head_dim + 3 * m->intermediate + m->heads * padded16(max_length));
}

void decode_rows(const RowModel* m, const RowLayer* layers, const RowStep* s, int threads) {
  const int64_t H = m->hidden, d = m->head_dim, heads = m->heads, kvh = m->kv_heads, I = m->intermediate;
  const int64_t R = s->rows, W = s->width, bs = m->block_size, nqkv = (heads + 2 * kvh) * d, group = heads / kvh;
  const int64_t cap = padded16(s->max_length), most_blocks = (s->max_length + bs - 1) / bs, chunks = (I + 15) / 16;
  float *h = s->h, *x = s->scratch, *tmp = x + R * H, *qkv = tmp + R * H, *attn = qkv + R * nqkv;
  float *gate_up = attn + R * heads * d, *act = gate_up + R * 2 * I, *probs = act + R * I;
  const int fmt = (int)m->weight_format;
  /* Eight barriers a layer: each loop below ends in one unless it says nowait. A layer's residual (the down
   * product in tmp) is added by the next layer's input norm, the last layer's after the loop. */
  #pragma omp parallel num_threads(threads)
  {
    for (int64_t l = 0; l < m->layers; ++l) {
      const RowLayer* L = layers + l;
      #pragma omp for schedule(static)
      for (int64_t r = 0; r < R; ++r)
        add_rms_norm_row(h + r * H, l ? tmp + r * H : NULL, l ? h + r * H : NULL, L->input_norm, x + r * H, H, m->eps);
      matvec_for(L->qkv, fmt, L->qkv_scale, x, qkv, R, nqkv, H);
      #pragma omp for schedule(static)
      for (int64_t t = 0; t < R * kvh; ++t) { /* (row, kv head) pairs: a row reads only its own context */
        const int64_t r = t / kvh, g = t % kvh;
        float *q = qkv + r * nqkv + g * group * d, *k = qkv + r * nqkv + (heads + g) * d, *v = k + kvh * d;
        if (L->qkv_bias) {
          const float* bias = L->qkv_bias;
          for (int64_t j = 0; j < group * d; ++j) q[j] += bias[g * group * d + j];
          for (int64_t j = 0; j < d; ++j) k[j] += bias[(heads + g) * d + j], v[j] += bias[(heads + kvh + g) * d + j];
        }
        rotate_half_heads(q, group, d, s->cos + r * d, s->sin + r * d);
        rotate_half_heads(k, 1, d, s->cos + r * d, s->sin + r * d);
        const int64_t at = (s->slots[r] * kvh + g) * d;
        for (int64_t j = 0; j < d; ++j) L->k_cache[at + j] = k[j], L->v_cache[at + j] = v[j];
        const PagedContext context = {L->k_cache, L->v_cache, NULL, NULL, s->tables + r * W, s->lengths[r], bs, kvh, d};
        attend_heads(&context, g, q, group, m->scale, probs + (r * heads + g * group) * cap, cap,
                     attn + (r * heads + g * group) * d, NULL);
      }
      if (s->block_mass) { /* probs is next written after the next layer's first barriers */
        #pragma omp for schedule(static) nowait
        for (int64_t t = 0; t < R * most_blocks; ++t) {
          const int64_t r = t / most_blocks, b = t % most_blocks;
          if (b * bs < s->lengths[r])
            credit_blocks(probs + r * heads * cap, heads, cap, s->lengths[r], bs, s->block_mass + r * W, b);
        }
      }
      matvec_for(L->o, fmt, L->o_scale, attn, tmp, R, H, heads * d);
      #pragma omp for schedule(static)
      for (int64_t r = 0; r < R; ++r)
        add_rms_norm_row(h + r * H, tmp + r * H, h + r * H, L->post_norm, x + r * H, H, m->eps);
      matvec_for(L->gate_up, fmt, L->gate_up_scale, x, gate_up, R, 2 * I, H);
      #pragma omp for schedule(static)
      for (int64_t t = 0; t < R * chunks; ++t) {
        const int64_t r = t / chunks, j = t % chunks * 16;
        const float* g = gate_up + r * 2 * I;
        if (m->activation == ACT_GELU_TANH)
          gelu_tanh_mul_16(g + j, g + I + j, act + r * I + j, I - j);
        else
          silu_mul_16(g + j, g + I + j, act + r * I + j, I - j);
      }
      matvec_for(L->down, fmt, L->down_scale, act, tmp, R, H, I);
    }
    #pragma omp for schedule(static)
    for (int64_t j = 0; j < R * H; ++j) h[j] += tmp[j];
  }
}
