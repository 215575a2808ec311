/* AVX-512 pieces shared by the CPU decode kernels: the rows of a streamed matrix-vector product (fp32 or bf16
 * weights), and a vector exp (the softmax and SiLU of a decode token would otherwise call expf tens of
 * thousands of times).
 */
#pragma once
#include <immintrin.h>
#include <stdint.h>

#define MATVEC_ROWS 8         /* weight rows per work item of the threads' split */
#define STREAMED_MAX_INPUTS 8 /* input rows one pass over the weights serves (more: oneDNN's blocked products) */
#define PREFETCH_BYTES 8192   /* how far ahead of its stream a few-input product asks for weights (into L2) */

static inline int64_t matvec_blocks(int64_t n) { return (n + MATVEC_ROWS - 1) / MATVEC_ROWS; }

/* The mask of the first n lanes, all 16 from n = 16 on: the lanes a vector step over what is left of a row reads. */
static inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* 16 weights of a row from element i on as fp32: fp32 as stored, bf16 widened (exact: bf16 is fp32's upper half).
 * Read with 256-bit loads: on this Zen 4 a stream of them reads ~1.15x faster than one of 512-bit loads. */
static inline __m512 load_weights(const void* w, int64_t i, int bf16) {
  if (bf16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)((const uint16_t*)w + i))), 16));
  const float* p = (const float*)w + i;
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(p + 8), 1);
}

static inline __m512 load_weights_tail(const void* w, int64_t i, __mmask16 tail, int bf16) {
  if (bf16)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail, (const uint16_t*)w + i)), 16));
  return _mm512_maskz_loadu_ps(tail, (const float*)w + i);
}

/* One row of W [n, k] (fp32, or bf16 when bf16 is set) times x: two accumulators, a k that is no multiple of 32 ends
 * with masked steps. */
static inline float dot_row(const void* w, int bf16, int64_t row, const float* x, int64_t k) {
  const int64_t base = row * k, body = k - k % 32;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (int64_t j = 0; j < body; j += 32) {
    a0 = _mm512_fmadd_ps(load_weights(w, base + j, bf16), _mm512_loadu_ps(x + j), a0);
    a1 = _mm512_fmadd_ps(load_weights(w, base + j + 16, bf16), _mm512_loadu_ps(x + j + 16), a1);
  }
  for (int64_t j = body; j < k; j += 16) {
    const __mmask16 mask = lanes(k - j);
    a0 = _mm512_fmadd_ps(load_weights_tail(w, base + j, mask, bf16), _mm512_maskz_loadu_ps(mask, x + j), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* y[i * n + r] = W[r] . x[i] for the R (1 or 2) weight rows r = row, row + 1 and the M input rows x[i] (k floats
 * each, consecutive), R and M compile-time constants: each weight vector is loaded once for all M inputs and each
 * input vector once for both rows (fewer loads per multiply-add: at 6-8 inputs two rows a pass are ~1.2x one). With
 * M products a weight the core falls behind the hardware prefetcher, so the rows are prefetched into L2
 * PREFETCH_BYTES ahead (2-8 inputs: ~1.2-1.5x oneDNN's blocked product, which reads its layout at ~17-20 GB/s here). */
static inline __attribute__((always_inline)) void dot_rows(const void* w, int bf16, int64_t row, const float* x,
                                                           float* y, int64_t n, int64_t k, const int R, const int M) {
  const int64_t body = k - k % 16, size = bf16 ? 2 : 4;
  __m512 acc[2][STREAMED_MAX_INPUTS];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < body; j += 16) {
    __m512 wv[2];
    for (int r = 0; r < R; ++r) {
      _mm_prefetch((const char*)w + ((row + r) * k + j) * size + PREFETCH_BYTES, _MM_HINT_T1);
      wv[r] = load_weights(w, (row + r) * k + j, bf16);
    }
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + j);
      for (int r = 0; r < R; ++r) acc[r][i] = _mm512_fmadd_ps(wv[r], xv, acc[r][i]);
    }
  }
  if (body < k) {
    const __mmask16 mask = lanes(k - body);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * k + body);
      for (int r = 0; r < R; ++r)
        acc[r][i] = _mm512_fmadd_ps(load_weights_tail(w, (row + r) * k + body, mask, bf16), xv, acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) y[i * n + row + r] = _mm512_reduce_add_ps(acc[r][i]);
}

#define DOT_ROWS(R)                                                  \
  switch (m) {                                                       \
    case 2: dot_rows(w, bf16, row, x, y, n, k, R, 2); break;         \
    case 3: dot_rows(w, bf16, row, x, y, n, k, R, 3); break;         \
    case 4: dot_rows(w, bf16, row, x, y, n, k, R, 4); break;         \
    case 5: dot_rows(w, bf16, row, x, y, n, k, R, 5); break;         \
    case 6: dot_rows(w, bf16, row, x, y, n, k, R, 6); break;         \
    case 7: dot_rows(w, bf16, row, x, y, n, k, R, 7); break;         \
    default: dot_rows(w, bf16, row, x, y, n, k, R, 8); break;        \
  }

/* y[i][8b .. 8b+8) = W[8b .. 8b+8) x[i] for the m (1 .. STREAMED_MAX_INPUTS; callers keep to that) input rows, the
 * weight rows one after another for one input (ONE sequential read per thread, which the hardware prefetcher follows
 * best: eight rows interleaved, eight streams 1-2 KB apart, read ~1.6x slower on one core here), two at a time for
 * more (two adjacent streams, prefetched by hand); x stays in L1/L2. Callers pass bf16 as a constant. */
static inline void matvec_block(const void* w, int bf16, const float* x, float* y, int64_t m, int64_t n, int64_t k,
                                int64_t b) {
  const int64_t n1 = (b + 1) * MATVEC_ROWS < n ? (b + 1) * MATVEC_ROWS : n;
  int64_t row = b * MATVEC_ROWS;
  if (m == 1) {
    for (; row < n1; ++row) y[row] = dot_row(w, bf16, row, x, k);
    return;
  }
  for (; row + 1 < n1; row += 2) DOT_ROWS(2)
  if (row < n1) DOT_ROWS(1)
}
#undef DOT_ROWS

/* y [m, n] = x [m, k] W^T with the eight-row blocks of W split over the threads of the enclosing OpenMP parallel
 * region (fp32 or bf16 W): each format its own loop. */
static inline void matvec_for(const void* w, int bf16, const float* x, float* y, int64_t m, int64_t n, int64_t k) {
  if (bf16) {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, 1, x, y, m, n, k, b);
  } else {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, 0, x, y, m, n, k, b);
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
