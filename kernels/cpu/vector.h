/* AVX-512 pieces shared by the CPU decode kernels: one eight-row block of a streamed matrix-vector product (fp32 or
 * bf16 weights), and a vector exp (the softmax and SiLU of a decode token would otherwise call expf tens of
 * thousands of times).
 */
#pragma once
#include <immintrin.h>
#include <stdint.h>

#define MATVEC_ROWS 8 /* rows per block: 8 accumulators + x + loads fit the 32 vector registers */

static inline int64_t matvec_blocks(int64_t n) { return (n + MATVEC_ROWS - 1) / MATVEC_ROWS; }

/* 16 weights of a row from element i on as fp32: fp32 as stored, bf16 widened (exact: bf16 is fp32's upper half). */
static inline __m512 load_weights(const void* w, int64_t i, int bf16) {
  if (bf16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)((const uint16_t*)w + i))), 16));
  return _mm512_loadu_ps((const float*)w + i);
}

static inline __m512 load_weights_tail(const void* w, int64_t i, __mmask16 tail, int bf16) {
  if (bf16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, (const uint16_t*)w + i)), 16));
  return _mm512_maskz_loadu_ps(tail, (const float*)w + i);
}

/* y[8b .. 8b+8) = W[8b .. 8b+8) x for W [n, k] row-major (fp32, or bf16 when bf16 is set: half the bytes to stream,
 * the products still fp32): each row accumulated in one register, the weight read once, in order (the hardware
 * prefetcher sees eight sequential streams), x from L1. A k that is no multiple of 16 ends with a masked load; a
 * last block of fewer than eight rows reads only its own rows. Callers pass bf16 as a constant: inlined, each
 * format gets its own loop. */
static inline void matvec_block(const void* w, int bf16, const float* x, float* y, int64_t n, int64_t k, int64_t b) {
  const int64_t n0 = b * MATVEC_ROWS;
  const int64_t rows = n - n0 < MATVEC_ROWS ? n - n0 : MATVEC_ROWS;
  const int64_t body = k - k % 16;
  const __mmask16 tail = (__mmask16)((1u << (k % 16)) - 1u);
  const int64_t base = n0 * k;
  __m512 acc[MATVEC_ROWS];
  for (int r = 0; r < MATVEC_ROWS; ++r) acc[r] = _mm512_setzero_ps();
  if (rows == MATVEC_ROWS) {
    for (int64_t j = 0; j < body; j += 16) {
      const __m512 xv = _mm512_loadu_ps(x + j);
      for (int r = 0; r < MATVEC_ROWS; ++r) acc[r] = _mm512_fmadd_ps(load_weights(w, base + r * k + j, bf16), xv, acc[r]);
    }
  } else {
    for (int64_t j = 0; j < body; j += 16) {
      const __m512 xv = _mm512_loadu_ps(x + j);
      for (int r = 0; r < rows; ++r) acc[r] = _mm512_fmadd_ps(load_weights(w, base + r * k + j, bf16), xv, acc[r]);
    }
  }
  if (tail) {
    const __m512 xv = _mm512_maskz_loadu_ps(tail, x + body);
    for (int r = 0; r < rows; ++r)
      acc[r] = _mm512_fmadd_ps(load_weights_tail(w, base + r * k + body, tail, bf16), xv, acc[r]);
  }
  for (int r = 0; r < rows; ++r) y[n0 + r] = _mm512_reduce_add_ps(acc[r]);
}

/* y = W x with the eight-row blocks split over the threads of the enclosing OpenMP parallel region (fp32 or bf16 W):
 * each format its own loop. */
static inline void matvec_for(const void* w, int bf16, const float* x, float* y, int64_t n, int64_t k) {
  if (bf16) {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, 1, x, y, n, k, b);
  } else {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, 0, x, y, n, k, b);
  }
}

/* e^x to about 1 ulp (Cephes' expf polynomial on x - n ln2, |x - n ln2| <= ln2 / 2, scaled by 2^n); inputs are
 * clamped to [-87.3, 88.7], where fp32's e^x is normal. */
static inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/* The mask of the first n lanes, all 16 from n = 16 on: the lanes a vector step over what is left of a row reads. */
static inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }
