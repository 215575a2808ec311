/* The rows of a streamed matrix-vector product (fp32, bf16, int8 or Q4_1 weights), shared by the CPU decode kernels,
 * in simd.h's 16-lane vectors.
 */
#pragma once
#include "oxygen_kernels.h"
#include "simd.h"

#define MATVEC_ROWS 8         /* weight rows per work item of the threads' split */
#define STREAMED_MAX_INPUTS 8 /* input rows one pass over the weights serves (more: oneDNN's blocked products) */
#define PREFETCH_BYTES 8192   /* how far ahead of its stream a few-input product asks for weights (into L2) */
#define I16_MAX_K 16384       /* longest input one int8 row product codes to int16 (on each thread's stack) */
#define I16_MIN_ABSMAX 0x1p-96f /* a group whose largest input is below this codes as zeros (32767 / it stays finite) */
_Static_assert(I8_GROUP == 32, "vf_dot_i8_i16 takes one group");

static inline int64_t matvec_blocks(int64_t n) { return (n + MATVEC_ROWS - 1) / MATVEC_ROWS; }

/* 16 weights of a row from element i on as fp32: fp32 as stored, bf16 widened (exact: bf16 is fp32's upper half),
 * int8 as its integer (row_weights applies its group's scale). */
static inline vf load_weights(const void* w, int64_t i, int format) {
  if (format == WEIGHTS_BF16) return vf_load_bf16((const uint16_t*)w + i);
  if (format == WEIGHTS_I8) return vf_load_i8((const int8_t*)w + i);
  return vf_load_stream((const float*)w + i);
}

/* The first n (< 16) of them, the other lanes 0. */
static inline vf load_weights_tail(const void* w, int64_t i, int64_t n, int format) {
  if (format == WEIGHTS_BF16) return vf_load_bf16_n((const uint16_t*)w + i, n);
  if (format == WEIGHTS_I8) return vf_load_i8_n((const int8_t*)w + i, n);
  return vf_load_n((const float*)w + i, n);
}

static inline int64_t i8_groups(int64_t k) { return (k + I8_GROUP - 1) / I8_GROUP; }

/* Where row `row`'s weights from element j on are stored (Q4_1: the block holding element j). */
static inline const char* weights_at(const void* w, int format, int64_t row, int64_t k, int64_t j) {
  if (format == WEIGHTS_Q4_1) return (const char*)w + (row * (k / Q4_1_GROUP) + j / Q4_1_GROUP) * Q4_1_BYTES;
  return (const char*)w + (row * k + j) * (format == WEIGHTS_BF16 ? 2 : format == WEIGHTS_I8 ? 1 : 4);
}

/* 16 weights of row `row` from its element j on (j a multiple of 16; not Q4_1, read a block at a time) as the values
 * they stand for: an int8 group's integers times its scale (16 divides I8_GROUP: one group), others as loaded. */
static inline vf row_weights(const void* w, int format, const float* scales, int64_t row, int64_t k, int64_t j) {
  const vf v = load_weights(w, row * k + j, format);
  return format == WEIGHTS_I8 ? vf_mul(v, vf_set1(scales[row * i8_groups(k) + j / I8_GROUP])) : v;
}

/* The same for the n weights from j on (all 16 from n = 16 on), the other lanes 0. */
static inline vf row_weights_tail(const void* w, int format, const float* scales, int64_t row, int64_t k, int64_t j,
                                  int64_t n) {
  const vf v = load_weights_tail(w, row * k + j, n, format);
  return format == WEIGHTS_I8 ? vf_mul(v, vf_set1(scales[row * i8_groups(k) + j / I8_GROUP])) : v;
}

/* One row of W [n, k] (stored as `format`, int8 with its group scales) times x: two accumulators, a k that is no
 * multiple of 32 ends with a partial step (Q4_1 has none). A Q4_1 row's products are the fp32 row's, operation for
 * operation, over the values its blocks stand for: the same sums as the fp32 weights llama.cpp's dequantization gives. */
static inline float dot_row(const void* w, int format, const float* scales, int64_t row, const float* x, int64_t k) {
  const int64_t body = k - k % 32;
  if (format == WEIGHTS_Q4_1) { /* a block a step, unpacked once (simd.h: d * q + m, as gguf dequantizes): fp32's
                                  loop over the values it stands for */
    const uint8_t* block = (const uint8_t*)weights_at(w, format, row, k, 0);
    vf a0 = vf_zero(), a1 = vf_zero();
    for (int64_t j = 0; j < k; j += Q4_1_GROUP, block += Q4_1_BYTES) {
      vf low, high;
      vf_load_q4_1(block, &low, &high);
      a0 = vf_fmadd(low, vf_loadu(x + j), a0);
      a1 = vf_fmadd(high, vf_loadu(x + j + 16), a1);
    }
    return vf_reduce_add(vf_add(a0, a1));
  }
  if (format == WEIGHTS_I8) { /* a group's products summed unscaled, then scaled once: ~10% faster than per vector */
    const int8_t* r = (const int8_t*)w + row * k;
    const float* s = scales + row * i8_groups(k);
    vf acc = vf_zero();
    for (int64_t j = 0; j < body; j += 32) {
      const vf part = vf_fmadd(vf_load_i8(r + j + 16), vf_loadu(x + j + 16), vf_mul(vf_load_i8(r + j), vf_loadu(x + j)));
      acc = vf_fmadd(part, vf_set1(s[j / I8_GROUP]), acc);
    }
    for (int64_t j = body; j < k; j += 16)
      acc = vf_fmadd(vf_mul(vf_load_i8_n(r + j, k - j), vf_load_n(x + j, k - j)), vf_set1(s[j / I8_GROUP]), acc);
    return vf_reduce_add(acc);
  }
  vf a0 = vf_zero(), a1 = vf_zero();
  for (int64_t j = 0; j < body; j += 32) {
    a0 = vf_fmadd(row_weights(w, format, scales, row, k, j), vf_loadu(x + j), a0);
    a1 = vf_fmadd(row_weights(w, format, scales, row, k, j + 16), vf_loadu(x + j + 16), a1);
  }
  for (int64_t j = body; j < k; j += 16)
    a0 = vf_fmadd(row_weights_tail(w, format, scales, row, k, j, k - j), vf_load_n(x + j, k - j), a0);
  return vf_reduce_add(vf_add(a0, a1));
}

/* x (k floats) as int16 codes, one scale per I8_GROUP: code = round(x * 32767 / the group's absmax), half to even,
 * scale = absmax / 32767 (a group below I16_MIN_ABSMAX: codes and scale 0; one holding a NaN or an infinity: scale
 * NaN, so the product is NaN as fp32's would be). codes holds i8_groups(k) whole groups; past k, zeros. */
static inline void code_i16(const float* x, int64_t k, int16_t* codes, float* scales) {
  for (int64_t j = 0; j < k; j += I8_GROUP) {
    vf top = vf_zero(), part[I8_GROUP / 16], nan = vf_zero(); /* x * 0 is NaN for NaN and infinities only */
    for (int h = 0; h < I8_GROUP / 16; ++h) {
      const int64_t left = k - j - 16 * h;
      part[h] = left > 0 ? vf_load_n(x + j + 16 * h, left) : vf_zero();
      top = vf_max(top, vf_max(part[h], vf_sub(vf_zero(), part[h])));
      nan = vf_add(nan, vf_mul(part[h], vf_zero()));
    }
    const float absmax = vf_reduce_max(top), finite = vf_reduce_add(nan);
    const int codes_it = absmax >= I16_MIN_ABSMAX && finite == 0.0f;
    const vf inv = vf_set1(codes_it ? 32767.0f / absmax : 0.0f);
    scales[j / I8_GROUP] = finite != 0.0f ? finite : codes_it ? absmax / 32767.0f : 0.0f;
    for (int h = 0; h < I8_GROUP / 16; ++h) vf_store_i16(codes + j + 16 * h, vf_mul(part[h], inv));
  }
}

/* One int8 row (its group scales) times x coded by code_i16: each group's 32 products summed exactly in integers,
 * then scaled by both scales once. Integer products of int16 codes read a group in ~4 vector operations where
 * widening both operands to fp32 takes ~7: a batch-1 decode with int8 weights is bound by them, not by its reads.
 * Two accumulators: each step depends on one, not on the last. */
static inline float dot_row_i16(const void* w, const float* scales, int64_t row, const int16_t* codes,
                                const float* code_scales, int64_t k) {
  const int64_t groups = i8_groups(k), whole = k / I8_GROUP;
  const int8_t* r = (const int8_t*)w + row * k;
  const float* s = scales + row * groups;
  vf a0 = vf_zero(), a1 = vf_zero();
  int64_t g = 0;
  for (; g + 1 < whole; g += 2) {
    a0 = vf_fmadd(vf_dot_i8_i16(r + g * I8_GROUP, codes + g * I8_GROUP), vf_set1(s[g] * code_scales[g]), a0);
    a1 = vf_fmadd(vf_dot_i8_i16(r + (g + 1) * I8_GROUP, codes + (g + 1) * I8_GROUP),
                  vf_set1(s[g + 1] * code_scales[g + 1]), a1);
  }
  if (g < whole) a0 = vf_fmadd(vf_dot_i8_i16(r + g * I8_GROUP, codes + g * I8_GROUP), vf_set1(s[g] * code_scales[g]), a0);
  float tail = 0.0f; /* a last, partial group (no whole 32 bytes to load): integers one by one */
  if (whole < groups) {
    int32_t sum = 0;
    for (int64_t j = whole * I8_GROUP; j < k; ++j) sum += r[j] * codes[j];
    tail = (float)sum * (s[whole] * code_scales[whole]);
  }
  return vf_reduce_add(vf_add(a0, a1)) + tail;
}

/* y[i * n + r] = W[r] . x[i] for the R (1 or 2) weight rows r = row, row + 1 and the
 * M input rows x[i] (k floats each, consecutive), R and M compile-time constants: each weight vector is loaded once
 * for all M inputs and each input vector once for both rows (fewer loads per multiply-add: at 6-8 inputs two rows a
 * pass are ~1.2x one). With M products a weight the core falls behind the hardware prefetcher, so the rows are
 * prefetched into L2 PREFETCH_BYTES ahead (2-8 inputs: ~1.2-1.5x oneDNN's blocked product, which reads its layout at
 * ~17-20 GB/s here). */
static inline __attribute__((always_inline)) void dot_rows(const void* w, int format, const float* scales, int64_t row,
                                                           const float* x, float* y, int64_t n, int64_t k, const int R,
                                                           const int M) {
  const int64_t body = k - k % 16;
  vf acc[2][STREAMED_MAX_INPUTS];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = vf_zero();
  if (format == WEIGHTS_Q4_1) { /* a block a step, unpacked once for all M inputs, summed in the fp32 loop's order */
    for (int64_t j = 0; j < k; j += Q4_1_GROUP) {
      vf low[2], high[2];
      for (int r = 0; r < R; ++r) {
        const char* block = weights_at(w, format, row + r, k, j);
        __builtin_prefetch(block + PREFETCH_BYTES, 0, 2); /* into L2 */
        vf_load_q4_1((const uint8_t*)block, low + r, high + r);
      }
      for (int i = 0; i < M; ++i) {
        const vf x0 = vf_loadu(x + i * k + j), x1 = vf_loadu(x + i * k + j + 16);
        for (int r = 0; r < R; ++r) acc[r][i] = vf_fmadd(high[r], x1, vf_fmadd(low[r], x0, acc[r][i]));
      }
    }
  } else {
    for (int64_t j = 0; j < body; j += 16) {
      vf wv[2];
      for (int r = 0; r < R; ++r) {
        __builtin_prefetch(weights_at(w, format, row + r, k, j) + PREFETCH_BYTES, 0, 2); /* into L2 */
        wv[r] = row_weights(w, format, scales, row + r, k, j);
      }
      for (int i = 0; i < M; ++i) {
        const vf xv = vf_loadu(x + i * k + j);
        for (int r = 0; r < R; ++r) acc[r][i] = vf_fmadd(wv[r], xv, acc[r][i]);
      }
    }
    for (int i = 0; i < M && body < k; ++i) {
      const vf xv = vf_load_n(x + i * k + body, k - body);
      for (int r = 0; r < R; ++r)
        acc[r][i] = vf_fmadd(row_weights_tail(w, format, scales, row + r, k, body, k - body), xv, acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) y[i * n + row + r] = vf_reduce_add(acc[r][i]);
}

#define DOT_ROWS(R)                                                          \
  switch (m) {                                                               \
    case 2: dot_rows(w, format, scales, row, x, y, n, k, R, 2); break;       \
    case 3: dot_rows(w, format, scales, row, x, y, n, k, R, 3); break;       \
    case 4: dot_rows(w, format, scales, row, x, y, n, k, R, 4); break;       \
    case 5: dot_rows(w, format, scales, row, x, y, n, k, R, 5); break;       \
    case 6: dot_rows(w, format, scales, row, x, y, n, k, R, 6); break;       \
    case 7: dot_rows(w, format, scales, row, x, y, n, k, R, 7); break;       \
    default: dot_rows(w, format, scales, row, x, y, n, k, R, 8); break;      \
  }

/* y[i][8b .. 8b+8) = W[8b .. 8b+8) x[i] for the m (1 .. STREAMED_MAX_INPUTS; callers keep to that) input rows, the
 * weight rows one after another for one input (ONE sequential read per thread, which the hardware prefetcher follows
 * best: eight rows interleaved, eight streams 1-2 KB apart, read ~1.6x slower on one core here), two at a time for
 * more (two adjacent streams, prefetched by hand); x stays in L1/L2. Callers pass the format as a constant. */
static inline void matvec_block(const void* w, int format, const float* scales, const float* x, float* y, int64_t m,
                                int64_t n, int64_t k, int64_t b) {
  const int64_t n1 = (b + 1) * MATVEC_ROWS < n ? (b + 1) * MATVEC_ROWS : n;
  int64_t row = b * MATVEC_ROWS;
  if (m == 1) {
    for (; row < n1; ++row) y[row] = dot_row(w, format, scales, row, x, k);
    return;
  }
  for (; row + 1 < n1; row += 2) DOT_ROWS(2)
  if (row < n1) DOT_ROWS(1)
}
#undef DOT_ROWS

/* y [m, n] = x [m, k] W^T with the eight-row blocks of W split over the threads of the enclosing OpenMP parallel
 * region (W fp32, bf16, int8 with one fp32 scale per I8_GROUP weights of a row in `scales`, or Q4_1 blocks): each
 * format its own loop. */
static inline void matvec_for(const void* w, int format, const float* scales, const float* x, float* y, int64_t m,
                              int64_t n, int64_t k) {
  if (format == WEIGHTS_BF16) {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, WEIGHTS_BF16, NULL, x, y, m, n, k, b);
  } else if (format == WEIGHTS_I8 && m == 1 && k > 0 && k <= I16_MAX_K) { /* one input: coded (dot_row_i16) */
    int16_t codes[i8_groups(k) * I8_GROUP];
    float code_scales[i8_groups(k)];
    code_i16(x, k, codes, code_scales); /* by every thread: the same codes, no barrier */
    #pragma omp for schedule(static)
    for (int64_t row = 0; row < n; ++row) y[row] = dot_row_i16(w, scales, row, codes, code_scales, k);
  } else if (format == WEIGHTS_I8) {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, WEIGHTS_I8, scales, x, y, m, n, k, b);
  } else if (format == WEIGHTS_Q4_1) {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, WEIGHTS_Q4_1, NULL, x, y, m, n, k, b);
  } else {
    #pragma omp for schedule(static)
    for (int64_t b = 0; b < matvec_blocks(n); ++b) matvec_block(w, WEIGHTS_F32, NULL, x, y, m, n, k, b);
  }
}
