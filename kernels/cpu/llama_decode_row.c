/* A whole Llama-style decoder stack for ONE sequence's decode token, in one call: batch-1 decode on a CPU. The
 * layer of Llama (RMSNorm, rotate-half RoPE, SwiGLU; Qwen2's q/k/v bias) and of Gemma, pi0 / pi0.5's backbone (GeGLU
 * with tanh GELU: RowModel.activation; its RMSNorm's 1 + w is the norm weight the caller passes); another family's
 * layer is a kernel of its own.
 *
 * Done layer by layer in torch, a decode token is ~40 small ops per layer whose dispatch costs as much as reading
 * the weights (SmolLM2-135M: ~14 ms of ops next to ~16 ms of weight reads per token). Here each layer is RMSNorm ->
 * fused q|k|v product (+ bias) -> RoPE (rotate-half) -> K/V stored at the token's pool slot -> attention over the
 * row's paged context (GQA; the blocks read in place through its block table) -> o product -> residual -> RMSNorm
 * -> fused gate|up product -> SiLU(gate) * up (or GELU) -> down product -> residual, inside one OpenMP region: the
 * products split their eight-row blocks over the threads, attention its query heads, the vector ops run on one.
 * All math is fp32 over an fp32 pool, as in the torch path (bf16 projection weights, when the model stores them so,
 * are widened to fp32 exactly as they are read; int8 ones are read as integers and each group's sum scaled; Q4_1
 * blocks dequantized as read, d * q + m); the attention mass of each block (summed over heads) is added to block_mass
 * when it is given, as the eviction policy reads it.
 */
#include <omp.h>

#include "attention.h"
#include "oxygen_kernels.h"
#include "row_ops.h"

int64_t decode_row_scratch(const RowModel* m, int64_t length) {
  const int64_t qkv = (m->heads + 2 * m->kv_heads) * m->head_dim;
  return 2 * m->hidden + qkv + m->heads * m->head_dim + 3 * m->intermediate + m->heads * padded16(length);
}

void decode_row(const RowModel* m, const RowLayer* layers, const RowStep* s, int threads) {
  const int64_t H = m->hidden, d = m->head_dim, heads = m->heads, kvh = m->kv_heads, I = m->intermediate;
  const int64_t nqkv = (heads + 2 * kvh) * d, group = heads / kvh, cap = padded16(s->length);
  const int64_t blocks = (s->length + m->block_size - 1) / m->block_size;
  float *h = s->h, *x = s->scratch, *tmp = x + H, *qkv = tmp + H, *attn = qkv + nqkv, *gate_up = attn + heads * d;
  float *act = gate_up + 2 * I, *probs = act + I;
  const int fmt = (int)m->weight_format;
  #pragma omp parallel num_threads(threads)
  for (int64_t l = 0; l < m->layers; ++l) {
    const RowLayer* L = layers + l;
    #pragma omp single
    add_rms_norm_row(h, NULL, NULL, L->input_norm, x, H, m->eps);
    matvec_for(L->qkv, fmt, L->qkv_scale, x, qkv, 1, nqkv, H);
    #pragma omp single
    {
      if (L->qkv_bias)
        for (int64_t j = 0; j < nqkv; ++j) qkv[j] += L->qkv_bias[j];
      rotate_half_heads(qkv, heads + kvh, d, s->cos, s->sin);
      float *k = L->k_cache + s->slot * kvh * d, *v = L->v_cache + s->slot * kvh * d;
      for (int64_t j = 0; j < kvh * d; ++j) { k[j] = qkv[heads * d + j]; v[j] = qkv[(heads + kvh) * d + j]; }
    }
    const PagedContext context = {L->k_cache, L->v_cache, NULL, NULL, s->table, s->length, m->block_size, kvh, d};
    #pragma omp for schedule(static)
    for (int64_t g = 0; g < kvh; ++g)
      attend_heads(&context, g, qkv + g * group * d, group, m->scale, probs + g * group * cap, cap,
                   attn + g * group * d, NULL);
    if (s->block_mass) {
      #pragma omp for schedule(static)
      for (int64_t b = 0; b < blocks; ++b) credit_blocks(probs, heads, cap, s->length, m->block_size, s->block_mass, b);
    }
    matvec_for(L->o, fmt, L->o_scale, attn, tmp, 1, H, heads * d);
    #pragma omp single
    add_rms_norm_row(h, tmp, h, L->post_norm, x, H, m->eps);
    matvec_for(L->gate_up, fmt, L->gate_up_scale, x, gate_up, 1, 2 * I, H);
    #pragma omp for schedule(static)
    for (int64_t j = 0; j < I; j += 16) {
      if (m->activation == ACT_GELU_TANH)
        gelu_tanh_mul_16(gate_up + j, gate_up + I + j, act + j, I - j);
      else
        silu_mul_16(gate_up + j, gate_up + I + j, act + j, I - j);
    }
    matvec_for(L->down, fmt, L->down_scale, act, tmp, 1, H, I);
    #pragma omp single
    for (int64_t j = 0; j < H; ++j) h[j] += tmp[j];
  }
}
