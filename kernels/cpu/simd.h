/* Sixteen fp32 lanes, the unit every CPU kernel computes in, on each instruction set the library is built for:
 * AVX-512 (one zmm register), AVX2 + FMA (two ymm) or aarch64 NEON (four q registers). The kernels are written once against these functions; which one a machine
 * runs is decided when kernels/cpu_library.py builds the library for it (no flag assumes AVX-512), and
 * test/kernels/c/check_kernels.c checks every build against scalar C (aarch64 under qemu).
 *
 * A count n names the lanes an operation covers: lanes [0, n) (all 16 from n = 16 on); lanes past it load as 0 and
 * are not stored, so a row that is no multiple of 16 ends with one partial step.
 */
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define SIMD_ISA "avx512"
#define VF_AVX512 1
#include <immintrin.h>
typedef __m512 vf;
#elif defined(__AVX2__) && defined(__FMA__)
#define SIMD_ISA "avx2"
#include <immintrin.h>
typedef struct { __m256 h[2]; } vf;
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define SIMD_ISA "neon"
#include <arm_neon.h>
typedef struct { float32x4_t q[4]; } vf;
#else
#error "the CPU kernels need AVX-512, AVX2 + FMA or aarch64 NEON (cpu_library builds them only there)"
#endif

#define VF_LANES 16

static inline int vf_count(int64_t n) { return n >= VF_LANES ? VF_LANES : n <= 0 ? 0 : (int)n; }

/* An IEEE half (a GGUF block's scale or minimum) as fp32, exactly: F16C's conversion where the build has it (x86 CPUs
 * that list it); elsewhere (subnormals included; weights carry no inf/NaN) its exponent and mantissa moved into
 * fp32's places, then rebased by 2^112, one exact multiply. */
static inline float f16_to_f32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t bits = (uint32_t)(h & 0x7FFF) << 13;
  float magnitude;
  memcpy(&magnitude, &bits, sizeof magnitude);
  magnitude *= 0x1p112f;
  return (h & 0x8000) ? -magnitude : magnitude;
#endif
}

#ifdef VF_AVX512
static inline __mmask16 vf_mask(int64_t n) { return (__mmask16)((1u << vf_count(n)) - 1u); }
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_loadu(const float* p) { return _mm512_loadu_ps(p); }
static inline void vf_storeu(float* p, vf x) { _mm512_storeu_ps(p, x); }
static inline vf vf_load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(vf_mask(n), p); }
static inline void vf_store_n(float* p, vf x, int64_t n) { _mm512_mask_storeu_ps(p, vf_mask(n), x); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
static inline vf vf_max_n(vf acc, vf x, int64_t n) { return _mm512_mask_max_ps(acc, vf_mask(n), acc, x); }
static inline vf vf_first_n(vf x, int64_t n) { return _mm512_maskz_mov_ps(vf_mask(n), x); }
static inline float vf_reduce_add(vf x) { return _mm512_reduce_add_ps(x); }
static inline float vf_reduce_max(vf x) { return _mm512_reduce_max_ps(x); }
static inline vf vf_round(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf vf_scale_pow2(vf p, vf n) { return _mm512_scalef_ps(p, n); } /* p * 2^n, n integral */
/* A weight stream read as two 256-bit loads: on Zen 4 a stream of them reads ~1.15x faster than 512-bit loads. */
static inline vf vf_load_stream(const float* p) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(p + 8), 1);
}
static inline vf vf_widen_bf16(__m256i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16)); }
static inline vf vf_load_bf16(const uint16_t* p) { return vf_widen_bf16(_mm256_loadu_si256((const __m256i*)p)); }
static inline vf vf_load_bf16_n(const uint16_t* p, int64_t n) { return vf_widen_bf16(_mm256_maskz_loadu_epi16(vf_mask(n), p)); }
static inline vf vf_load_i8(const int8_t* p) { /* 16 int8 as fp32 (exact) */
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
static inline vf vf_load_i8_n(const int8_t* p, int64_t n) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(vf_mask(n), p)));
}
/* The 32 weights of a GGUF Q4_1 block (fp16 d and m, then 16 bytes: weights 0-15 in the low nibbles, 16-31 in the
 * high ones) as the values they stand for, d * q + m in one rounding: the block's 16 possible values computed once,
 * then each weight picked from them by its nibble (vpermps reads an index's low four bits: the low nibbles need no
 * mask). Measured on Zen 4 against widening each nibble and a multiply-add per weight, or widening a row's scales
 * first: 1.2-1.4x faster; its cross-lane shuffles are what bounds it. */
static inline void vf_load_q4_1(const uint8_t* block, vf* low, vf* high) {
#if defined(__F16C__)
  int32_t halves;
  memcpy(&halves, block, sizeof halves);
  const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(halves)); /* d, m, 0, 0 */
  const vf d = _mm512_broadcastss_ps(dm), m = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
#else
  uint16_t halves[2];
  memcpy(halves, block, sizeof halves);
  const vf d = _mm512_set1_ps(f16_to_f32(halves[0])), m = _mm512_set1_ps(f16_to_f32(halves[1]));
#endif
  const vf levels = _mm512_fmadd_ps(_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), d, m);
  const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(block + 4)));
  *low = _mm512_permutexvar_ps(codes, levels);
  *high = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), levels);
}
/* The 32 products of int8 weights w and int16 codes x, summed in adjacent pairs (vpmaddwd, exact: a pair is at most
 * 2 * 127 * 32767 < 2^24) as 16 fp32 lanes. */
static inline vf vf_dot_i8_i16(const int8_t* w, const int16_t* x) {
  const __m512i weights = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)w));
  return _mm512_cvtepi32_ps(_mm512_madd_epi16(weights, _mm512_loadu_si512(x)));
}
static inline void vf_store_i16(int16_t* p, vf x) { /* 16 lanes rounded to the nearest (even) integer, in range */
  const __m512i rounded = _mm512_cvt_roundps_epi32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm256_storeu_si256((__m256i*)p, _mm512_cvtepi32_epi16(rounded));
}
static inline vf vf_gather(const float* first, int64_t stride) { /* first[i * stride] for i < 16 */
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32((int)stride));
  return _mm512_i32gather_ps(rows, first, 4);
}

#else /* AVX2 and NEON: each operation a loop over the ISA's VF_P registers of VF_W lanes */
#if defined(__AVX2__) && defined(__FMA__)
#define VF_P 2
#define VF_W 8
#define VF_REG(x, i) ((x).h[i])
typedef __m256 vreg;
static inline vreg vr_set1(float x) { return _mm256_set1_ps(x); }
static inline vreg vr_loadu(const float* p) { return _mm256_loadu_ps(p); }
static inline void vr_storeu(float* p, vreg x) { _mm256_storeu_ps(p, x); }
static inline vreg vr_add(vreg a, vreg b) { return _mm256_add_ps(a, b); }
static inline vreg vr_sub(vreg a, vreg b) { return _mm256_sub_ps(a, b); }
static inline vreg vr_mul(vreg a, vreg b) { return _mm256_mul_ps(a, b); }
static inline vreg vr_div(vreg a, vreg b) { return _mm256_div_ps(a, b); }
static inline vreg vr_min(vreg a, vreg b) { return _mm256_min_ps(a, b); }
static inline vreg vr_max(vreg a, vreg b) { return _mm256_max_ps(a, b); }
static inline vreg vr_fmadd(vreg a, vreg b, vreg c) { return _mm256_fmadd_ps(a, b, c); }
static inline vreg vr_fnmadd(vreg a, vreg b, vreg c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vreg vr_round(vreg x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vreg vr_pow2(vreg n) { /* 2^n for integral n in [-126, 127] */
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline vreg vr_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static inline float vr_sum(vreg x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vr_top(vreg x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline vf vf_load_i8(const int8_t* p) { /* 16 int8 as fp32 (exact) */
  const __m128i bytes = _mm_loadu_si128((const __m128i*)p);
  return (vf){{_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)),
               _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)))}};
}
static inline vf vf_load_nibbles(const uint8_t* p, int shift) { /* (p[i] >> shift) & 15 for i < 16, as fp32 */
  const __m128i bytes = _mm_loadu_si128((const __m128i*)p);
  const __m128i nibbles = _mm_and_si128(_mm_srl_epi16(bytes, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(0x0F));
  return (vf){{_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nibbles)),
               _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(nibbles, 8)))}};
}
static inline vf vf_dot_i8_i16(const int8_t* w, const int16_t* x) { /* see the AVX-512 version */
  const __m128i bytes0 = _mm_loadu_si128((const __m128i*)w), bytes1 = _mm_loadu_si128((const __m128i*)w + 1);
  const __m256i p0 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(bytes0), _mm256_loadu_si256((const __m256i*)x));
  const __m256i p1 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(bytes1), _mm256_loadu_si256((const __m256i*)x + 1));
  return (vf){{_mm256_cvtepi32_ps(p0), _mm256_cvtepi32_ps(p1)}};
}
static inline void vf_store_i16(int16_t* p, vf x) { /* packs interleaves its halves by 128-bit lane: reordered */
  const __m256i low = _mm256_cvtps_epi32(vr_round(x.h[0])), high = _mm256_cvtps_epi32(vr_round(x.h[1]));
  const __m256i packed = _mm256_packs_epi32(low, high);
  _mm256_storeu_si256((__m256i*)p, _mm256_permute4x64_epi64(packed, 0xD8));
}
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define VF_P 4
#define VF_W 4
#define VF_REG(x, i) ((x).q[i])
typedef float32x4_t vreg;
static inline vreg vr_set1(float x) { return vdupq_n_f32(x); }
static inline vreg vr_loadu(const float* p) { return vld1q_f32(p); }
static inline void vr_storeu(float* p, vreg x) { vst1q_f32(p, x); }
static inline vreg vr_add(vreg a, vreg b) { return vaddq_f32(a, b); }
static inline vreg vr_sub(vreg a, vreg b) { return vsubq_f32(a, b); }
static inline vreg vr_mul(vreg a, vreg b) { return vmulq_f32(a, b); }
static inline vreg vr_div(vreg a, vreg b) { return vdivq_f32(a, b); }
static inline vreg vr_min(vreg a, vreg b) { return vminq_f32(a, b); }
static inline vreg vr_max(vreg a, vreg b) { return vmaxq_f32(a, b); }
static inline vreg vr_fmadd(vreg a, vreg b, vreg c) { return vfmaq_f32(c, a, b); }
static inline vreg vr_fnmadd(vreg a, vreg b, vreg c) { return vfmsq_f32(c, a, b); }
static inline vreg vr_round(vreg x) { return vrndnq_f32(x); }
static inline vreg vr_pow2(vreg n) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
static inline vreg vr_bf16(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
static inline float vr_sum(vreg x) { return vaddvq_f32(x); }
static inline float vr_top(vreg x) { return vmaxvq_f32(x); }
static inline vf vf_load_i8(const int8_t* p) { /* 16 int8 as fp32 (exact) */
  const int8x16_t bytes = vld1q_s8(p);
  const int16x8_t lo = vmovl_s8(vget_low_s8(bytes)), hi = vmovl_high_s8(bytes);
  return (vf){{vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vcvtq_f32_s32(vmovl_high_s16(lo)),
               vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vcvtq_f32_s32(vmovl_high_s16(hi))}};
}
static inline vf vf_load_nibbles(const uint8_t* p, int shift) { /* (p[i] >> shift) & 15 for i < 16, as fp32 */
  const uint8x16_t nibbles = vandq_u8(vshlq_u8(vld1q_u8(p), vdupq_n_s8((int8_t)-shift)), vdupq_n_u8(0x0F));
  const uint16x8_t lo = vmovl_u8(vget_low_u8(nibbles)), hi = vmovl_high_u8(nibbles);
  return (vf){{vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), vcvtq_f32_u32(vmovl_high_u16(lo)),
               vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), vcvtq_f32_u32(vmovl_high_u16(hi))}};
}
static inline vf vf_dot_i8_i16(const int8_t* w, const int16_t* x) { /* see the AVX-512 version: lanes j, j + 4 */
  const int8x16_t b0 = vld1q_s8(w), b1 = vld1q_s8(w + 16);
  const int16x8_t w16[4] = {vmovl_s8(vget_low_s8(b0)), vmovl_high_s8(b0), vmovl_s8(vget_low_s8(b1)), vmovl_high_s8(b1)};
  vf r;
  for (int i = 0; i < 4; ++i) {
    const int16x8_t x16 = vld1q_s16(x + 8 * i);
    r.q[i] = vcvtq_f32_s32(vmlal_high_s16(vmull_s16(vget_low_s16(w16[i]), vget_low_s16(x16)), w16[i], x16));
  }
  return r;
}
static inline void vf_store_i16(int16_t* p, vf x) { /* rounded to the nearest (even) integer, in range */
  for (int i = 0; i < 4; ++i) vst1_s16(p + 4 * i, vqmovn_s32(vcvtnq_s32_f32(x.q[i])));
}
#endif

#define VF_MAP1(f, a)                                          \
  vf r;                                                        \
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = f(VF_REG(a, i)); \
  return r
#define VF_MAP2(f, a, b)                                                      \
  vf r;                                                                       \
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = f(VF_REG(a, i), VF_REG(b, i)); \
  return r

static inline vf vf_set1(float x) {
  vf r;
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = vr_set1(x);
  return r;
}
static inline vf vf_zero(void) { return vf_set1(0.0f); }
static inline vf vf_loadu(const float* p) {
  vf r;
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = vr_loadu(p + i * VF_W);
  return r;
}
static inline vf vf_load_stream(const float* p) { return vf_loadu(p); }
static inline void vf_storeu(float* p, vf x) {
  for (int i = 0; i < VF_P; ++i) vr_storeu(p + i * VF_W, VF_REG(x, i));
}
static inline vf vf_load_n(const float* p, int64_t n) { /* a partial step copies: it is one per row */
  if (n >= VF_LANES) return vf_loadu(p);
  float lanes[VF_LANES] = {0};
  memcpy(lanes, p, (size_t)vf_count(n) * sizeof(float));
  return vf_loadu(lanes);
}
static inline void vf_store_n(float* p, vf x, int64_t n) {
  if (n >= VF_LANES) {
    vf_storeu(p, x);
    return;
  }
  float lanes[VF_LANES];
  vf_storeu(lanes, x);
  memcpy(p, lanes, (size_t)vf_count(n) * sizeof(float));
}
static inline vf vf_add(vf a, vf b) { VF_MAP2(vr_add, a, b); }
static inline vf vf_sub(vf a, vf b) { VF_MAP2(vr_sub, a, b); }
static inline vf vf_mul(vf a, vf b) { VF_MAP2(vr_mul, a, b); }
static inline vf vf_div(vf a, vf b) { VF_MAP2(vr_div, a, b); }
static inline vf vf_min(vf a, vf b) { VF_MAP2(vr_min, a, b); }
static inline vf vf_max(vf a, vf b) { VF_MAP2(vr_max, a, b); }
static inline vf vf_round(vf x) { VF_MAP1(vr_round, x); }
static inline vf vf_fmadd(vf a, vf b, vf c) {
  vf r;
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = vr_fmadd(VF_REG(a, i), VF_REG(b, i), VF_REG(c, i));
  return r;
}
static inline vf vf_fnmadd(vf a, vf b, vf c) { /* c - a b */
  vf r;
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = vr_fnmadd(VF_REG(a, i), VF_REG(b, i), VF_REG(c, i));
  return r;
}
static inline vf vf_scale_pow2(vf p, vf n) { /* p * 2^n for integral n in [-252, 254]: two normal factors */
  const vf half = vf_round(vf_mul(n, vf_set1(0.5f)));
  vf a, b;
  for (int i = 0; i < VF_P; ++i) {
    VF_REG(a, i) = vr_pow2(VF_REG(half, i));
    VF_REG(b, i) = vr_pow2(vr_sub(VF_REG(n, i), VF_REG(half, i)));
  }
  return vf_mul(vf_mul(p, a), b);
}
static inline float vf_reduce_add(vf x) {
  float s = 0.0f;
  for (int i = 0; i < VF_P; ++i) s += vr_sum(VF_REG(x, i));
  return s;
}
static inline float vf_reduce_max(vf x) {
  float m = vr_top(VF_REG(x, 0));
  for (int i = 1; i < VF_P; ++i) m = fmaxf(m, vr_top(VF_REG(x, i)));
  return m;
}
static inline vf vf_first_n(vf x, int64_t n) { /* lanes [n, 16) zeroed */
  if (n >= VF_LANES) return x;
  float lanes[VF_LANES];
  vf_storeu(lanes, x);
  for (int i = vf_count(n); i < VF_LANES; ++i) lanes[i] = 0.0f;
  return vf_loadu(lanes);
}
static inline vf vf_max_n(vf acc, vf x, int64_t n) { /* lanes [0, n) max(acc, x), the others acc */
  if (n >= VF_LANES) return vf_max(acc, x);
  float a[VF_LANES], b[VF_LANES];
  vf_storeu(a, acc);
  vf_storeu(b, x);
  for (int i = 0; i < vf_count(n); ++i) a[i] = b[i] > a[i] ? b[i] : a[i];
  return vf_loadu(a);
}
static inline vf vf_load_bf16(const uint16_t* p) {
  vf r;
  for (int i = 0; i < VF_P; ++i) VF_REG(r, i) = vr_bf16(p + i * VF_W);
  return r;
}
static inline vf vf_load_bf16_n(const uint16_t* p, int64_t n) {
  if (n >= VF_LANES) return vf_load_bf16(p);
  uint16_t lanes[VF_LANES] = {0};
  memcpy(lanes, p, (size_t)vf_count(n) * sizeof(uint16_t));
  return vf_load_bf16(lanes);
}
static inline vf vf_load_i8_n(const int8_t* p, int64_t n) {
  if (n >= VF_LANES) return vf_load_i8(p);
  int8_t lanes[VF_LANES] = {0};
  memcpy(lanes, p, (size_t)vf_count(n));
  return vf_load_i8(lanes);
}
/* The 32 weights of a Q4_1 block as the values they stand for (see the AVX-512 version): each nibble widened,
 * d * q + m. */
static inline void vf_load_q4_1(const uint8_t* block, vf* low, vf* high) {
  uint16_t halves[2];
  memcpy(halves, block, sizeof halves);
  const vf d = vf_set1(f16_to_f32(halves[0])), m = vf_set1(f16_to_f32(halves[1]));
  *low = vf_fmadd(vf_load_nibbles(block + 4, 0), d, m);
  *high = vf_fmadd(vf_load_nibbles(block + 4, 4), d, m);
}
static inline vf vf_gather(const float* first, int64_t stride) { /* first[i * stride] for i < 16 */
  float lanes[VF_LANES];
  for (int i = 0; i < VF_LANES; ++i) lanes[i] = first[i * stride];
  return vf_loadu(lanes);
}
#undef VF_MAP1
#undef VF_MAP2
#endif

/* e^x to about 1 ulp (Cephes' expf polynomial on x - n ln2, |x - n ln2| <= ln2 / 2, scaled by 2^n); inputs are
 * clamped to [-87.3, 88.7], where fp32's e^x is normal. */
static inline vf vf_exp(vf x) {
  x = vf_min(vf_max(x, vf_set1(-87.3f)), vf_set1(88.7f));
  const vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
  vf r = vf_fnmadd(n, vf_set1(0.693359375f), x);
  r = vf_fnmadd(n, vf_set1(-2.12194440e-4f), r);
  vf p = vf_set1(1.9875691500e-4f);
  p = vf_fmadd(p, r, vf_set1(1.3981999507e-3f));
  p = vf_fmadd(p, r, vf_set1(8.3334519073e-3f));
  p = vf_fmadd(p, r, vf_set1(4.1665795894e-2f));
  p = vf_fmadd(p, r, vf_set1(1.6666665459e-1f));
  p = vf_fmadd(p, r, vf_set1(5.0000001201e-1f));
  p = vf_fmadd(vf_mul(p, r), r, vf_add(r, vf_set1(1.0f)));
  return vf_scale_pow2(p, n);
}
