/* Every CPU kernel of kernels/cpu against scalar C written here, with no Python: built once per instruction set
 * (test_c_kernels.py: AVX-512 and AVX2 and plain C natively, AVX2 again under qemu's Haswell, which has no AVX-512,
 * and aarch64 NEON under qemu-aarch64 on a Cortex-A53, which has no dotprod, and on qemu's `max` CPU).
 *
 * Shapes cover what the engine sends: rows that are no multiple of 16, one to eight input rows, fp32, bf16, int8 and
 * Q4_1 weights, GQA groups of 1 to 4, head sizes 16 to 256, ragged contexts over shuffled blocks, shared prefixes of
 * several rows, block mass, a whole Llama stack (SwiGLU) or Gemma stack (GeGLU) for one token. Prints the instruction set and one line per check;
 * exits 1 at the first kernel that differs from the reference by more than its tolerance.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oxygen_kernels.h"

#define THREADS 2
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int checks;

static float uniform(void) { /* [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static float* randoms(int64_t n, float scale) {
  float* x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) x[i] = uniform() * scale;
  return x;
}

static float bf16_value(uint16_t b) {
  const uint32_t bits = (uint32_t)b << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

/* Fails unless |got - want| <= atol + rtol |want| everywhere. */
static void expect_close(const char* what, const float* got, const double* want, int64_t n, double atol, double rtol) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = fabs((double)got[i] - want[i]), limit = atol + rtol * fabs(want[i]);
    if (!(err <= limit)) {
      printf("FAIL %s: element %lld is %.7g, the reference %.7g\n", what, (long long)i, got[i], want[i]);
      exit(1);
    }
    worst = err > worst ? err : worst;
  }
  ++checks;
  printf("ok   %-60s max error %.2e\n", what, worst);
}

static const char* const FORMAT_NAMES[] = {"fp32", "bf16", "int8", "q4_1"};

/* fp32 -> IEEE half, rounded to nearest even (normal halves: the test's scales and minima are). */
static uint16_t half_of(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7FFFFFFFu;
  if (magnitude < 0x38800000u) return (uint16_t)sign; /* below the smallest normal half: 0 */
  uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
  return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

static double half_value(uint16_t h) { /* normal: (1024 + mantissa) 2^(exponent - 25); subnormal: mantissa 2^-24 */
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  const double magnitude = exponent ? ldexp(1024 + mantissa, exponent - 25) : ldexp(mantissa, -24);
  return h & 0x8000 ? -magnitude : magnitude;
}

/* Rows [n, k] (k a multiple of Q4_1_GROUP) as llama.cpp's reference quantize_row_q4_1 writes them (d = (max - min) /
 * 15 and m = min, stored as halves; q = (x - min) / d rounded, at most 15), and `values` replaced by what the blocks
 * stand for (d * q + m, computed in double here). */
static uint8_t* q4_1_rows(int64_t n, int64_t k, float* values) {
  const int64_t blocks = k / Q4_1_GROUP;
  uint8_t* rows = malloc((size_t)(n * blocks * Q4_1_BYTES));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      float* x = values + r * k + b * Q4_1_GROUP;
      uint8_t* block = rows + (r * blocks + b) * Q4_1_BYTES;
      float lo = x[0], hi = x[0];
      for (int j = 1; j < Q4_1_GROUP; ++j) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
      const float d = (hi - lo) / 15.0f, id = d ? 1.0f / d : 0.0f;
      const uint16_t dh = half_of(d), mh = half_of(lo);
      memcpy(block, &dh, 2), memcpy(block + 2, &mh, 2);
      for (int j = 0; j < Q4_1_GROUP / 2; ++j) {
        int q0 = (int)((x[j] - lo) * id + 0.5f), q1 = (int)((x[j + 16] - lo) * id + 0.5f);
        q0 = q0 > 15 ? 15 : q0, q1 = q1 > 15 ? 15 : q1;
        block[4 + j] = (uint8_t)(q0 | q1 << 4);
        x[j] = (float)(half_value(dh) * q0 + half_value(mh));
        x[j + 16] = (float)(half_value(dh) * q1 + half_value(mh));
      }
    }
  return rows;
}

/* Rows of `format` with the fp32 values they stand for in `values` (int8: integer times its group's scale; Q4_1:
 * d * q + m). */
static const void* weights_of(int format, int64_t n, int64_t k, float* values, float** scales) {
  *scales = NULL;
  if (format == WEIGHTS_F32) return values;
  if (format == WEIGHTS_BF16) {
    uint16_t* rows = malloc((size_t)(n * k) * sizeof(uint16_t));
    for (int64_t i = 0; i < n * k; ++i) {
      uint32_t bits;
      memcpy(&bits, &values[i], sizeof bits);
      rows[i] = (uint16_t)(bits >> 16);
      values[i] = bf16_value(rows[i]);
    }
    return rows;
  }
  if (format == WEIGHTS_Q4_1) return q4_1_rows(n, k, values);
  const int64_t groups = (k + I8_GROUP - 1) / I8_GROUP;
  int8_t* rows = malloc((size_t)(n * k));
  *scales = malloc((size_t)(n * groups) * sizeof(float));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) { /* each group of a row quantized by its absmax, as the engine does */
      const int64_t j0 = g * I8_GROUP, j1 = j0 + I8_GROUP < k ? j0 + I8_GROUP : k;
      float top = 0.0f, *scale = *scales + r * groups + g;
      for (int64_t j = j0; j < j1; ++j) top = fmaxf(top, fabsf(values[r * k + j]));
      *scale = top > 0.0f ? top / 127.0f : 1.0f;
      for (int64_t j = j0; j < j1; ++j) {
        rows[r * k + j] = (int8_t)lrintf(values[r * k + j] / *scale);
        values[r * k + j] = rows[r * k + j] * *scale;
      }
    }
  return rows;
}

/* What an int8 product of one input row reads of it (vector.h, code_i16): per I8_GROUP, int16 codes of x * 32767 /
 * the group's absmax, rounded to nearest even, times absmax / 32767 (a group below vector.h's I16_MIN_ABSMAX, 2^-96:
 * zeros); the same float operations, one at a time. */
static double* coded_i16(const float* x, int64_t k) {
  double* coded = malloc((size_t)k * sizeof(double));
  for (int64_t j0 = 0; j0 < k; j0 += I8_GROUP) {
    const int64_t j1 = j0 + I8_GROUP < k ? j0 + I8_GROUP : k;
    float absmax = 0.0f;
    for (int64_t j = j0; j < j1; ++j) absmax = fabsf(x[j]) > absmax ? fabsf(x[j]) : absmax;
    const int codes_it = absmax >= 0x1p-96f;
    const float inv = codes_it ? 32767.0f / absmax : 0.0f, scale = codes_it ? absmax / 32767.0f : 0.0f;
    for (int64_t j = j0; j < j1; ++j) coded[j] = (double)lrintf(x[j] * inv) * scale;
  }
  return coded;
}

static void check_matvec(int format, int64_t m, int64_t n, int64_t k) {
  float* values = randoms(n * k, 1.0f);
  float* scales;
  const void* w = weights_of(format, n, k, values, &scales);
  float *x = randoms(m * k, 1.0f), *y = calloc((size_t)(m * n), sizeof(float));
  double* want = calloc((size_t)(m * n), sizeof(double));
  double* coded = format == WEIGHTS_I8 && m == 1 ? coded_i16(x, k) : NULL; /* else fp32 inputs as they are */
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) want[i * n + r] += (double)values[r * k + j] * (coded ? coded[j] : x[i * k + j]);
  free(coded);
  matvec(w, format, scales, x, y, m, n, k, THREADS);
  char what[96];
  snprintf(what, sizeof what, "matvec %s m=%lld n=%lld k=%lld", FORMAT_NAMES[format], (long long)m, (long long)n,
           (long long)k);
  expect_close(what, y, want, m * n, 2e-7 * sqrt((double)k), 2e-6);
  if (w != values) free((void*)w);
  free(values), free(scales), free(x), free(y), free(want);
}

static void check_row_ops(int64_t rows, int64_t n, float range) {
  float *h = randoms(rows * n, range), *delta = randoms(rows * n, 1.0f), *w = randoms(n, 1.0f);
  float *sum = calloc((size_t)(rows * n), sizeof(float)), *out = calloc((size_t)(rows * n), sizeof(float));
  double *want_sum = calloc((size_t)(rows * n), sizeof(double)), *want = calloc((size_t)(rows * n), sizeof(double));
  const float eps = 1e-5f;
  for (int with_delta = 0; with_delta < 2; ++with_delta) {
    for (int64_t r = 0; r < rows; ++r) {
      double squares = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double s = (double)h[r * n + j] + (with_delta ? (double)delta[r * n + j] : 0.0);
        want_sum[r * n + j] = s, squares += s * s;
      }
      for (int64_t j = 0; j < n; ++j) want[r * n + j] = want_sum[r * n + j] / sqrt(squares / n + eps) * w[j];
    }
    add_rms_norm_f32(h, with_delta ? delta : NULL, sum, w, out, rows, n, eps, THREADS);
    char what[96];
    snprintf(what, sizeof what, "add_rms_norm %s rows=%lld n=%lld inputs within %g", with_delta ? "h+delta" : "h",
             (long long)rows, (long long)n, range);
    expect_close(what, out, want, rows * n, 1e-6, 2e-6);
    if (with_delta) expect_close("  its sum", sum, want_sum, rows * n, 1e-6, 1e-6);
  }
  const int64_t inter = n / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < inter; ++j) {
      const double g = h[r * 2 * inter + j], u = h[r * 2 * inter + inter + j];
      want[r * inter + j] = g / (1.0 + exp(-g)) * u;
    }
  silu_mul_f32(h, out, rows, inter, THREADS);
  char what[96];
  snprintf(what, sizeof what, "silu_mul rows=%lld inter=%lld inputs within %g", (long long)rows, (long long)inter,
           range);
  expect_close(what, out, want, rows * inter, 1e-6, 2e-6);
  free(h), free(delta), free(w), free(sum), free(out), free(want_sum), free(want);
}

static void check_rotate_half(int64_t rows, int64_t heads, int64_t head_dim) {
  const int64_t stride = (heads + 1) * head_dim; /* a row holds one more head, left alone */
  float *x = randoms(rows * stride, 1.0f), *cos_ = randoms(rows * head_dim, 1.0f), *sin_ = randoms(rows * head_dim, 1.0f);
  double* want = malloc((size_t)(rows * stride) * sizeof(double));
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < stride; ++i) {
      const int64_t hd = i / head_dim, j = i % head_dim;
      const float* v = x + r * stride + hd * head_dim;
      const double c = cos_[r * head_dim + j], s = sin_[r * head_dim + j];
      want[r * stride + i] = hd >= heads ? v[j] : j < half ? v[j] * c - (double)v[j + half] * s
                                                           : v[j] * c + (double)v[j - half] * s;
    }
  rotate_half_f32(x, rows, stride, heads, head_dim, cos_, sin_, THREADS);
  char what[96];
  snprintf(what, sizeof what, "rotate_half rows=%lld heads=%lld head_dim=%lld", (long long)rows, (long long)heads,
           (long long)head_dim);
  expect_close(what, x, want, rows * stride, 1e-6, 1e-6);
  free(x), free(cos_), free(sin_), free(want);
}

/* softmax(q K^T * scale) V of one query head over `length` tokens of a paged context (double), and each block's
 * share of the weights added to mass (if given). */
static void reference_attention(const float* q, const float* k, const float* v, const int64_t* table, int64_t length,
                                int64_t block_size, int64_t kv_heads, int64_t kv_head, int64_t d, float scale,
                                double* out, double* mass) {
  double* w = malloc((size_t)length * sizeof(double));
  double top = -INFINITY, total = 0.0;
  for (int64_t t = 0; t < length; ++t) {
    const float* row = k + ((table[t / block_size] * block_size + t % block_size) * kv_heads + kv_head) * d;
    double s = 0.0;
    for (int64_t j = 0; j < d; ++j) s += (double)q[j] * row[j];
    w[t] = s * scale, top = w[t] > top ? w[t] : top;
  }
  for (int64_t t = 0; t < length; ++t) w[t] = exp(w[t] - top), total += w[t];
  for (int64_t j = 0; j < d; ++j) out[j] = 0.0;
  for (int64_t t = 0; t < length; ++t) {
    const float* row = v + ((table[t / block_size] * block_size + t % block_size) * kv_heads + kv_head) * d;
    for (int64_t j = 0; j < d; ++j) out[j] += w[t] / total * row[j];
    if (mass) mass[t / block_size] += w[t] / total;
  }
  free(w);
}

/* int8 storage of the pool view k, v [units, block_size, kv_heads, d] as the engine lays it out (kernels/quant_spec.py):
 * keys per (unit, kv head, channel) with a bf16 scale over the unit's tokens, values per (token, kv head) with an fp32
 * scale; k and v become the values the codes stand for, the reference's input. */
static void int8_view(float* k, float* v, int64_t units, int64_t block_size, int64_t kv_heads, int64_t d,
                      int8_t** k_codes, int8_t** v_codes, uint16_t** k_scale, float** v_scale) {
  const int64_t n = units * block_size * kv_heads * d, row = kv_heads * d;
  *k_codes = malloc((size_t)n), *v_codes = malloc((size_t)n);
  *k_scale = malloc((size_t)(units * row) * sizeof(uint16_t));
  *v_scale = malloc((size_t)(units * block_size * kv_heads) * sizeof(float));
  for (int64_t u = 0; u < units; ++u)
    for (int64_t c = 0; c < row; ++c) { /* one key channel of one kv head over the unit's tokens */
      float top = 0.0f;
      for (int64_t t = 0; t < block_size; ++t) top = fmaxf(top, fabsf(k[(u * block_size + t) * row + c]));
      const float wanted = top > 0.0f ? top / 127.0f : 1.0f;
      uint32_t bits;
      memcpy(&bits, &wanted, sizeof bits);
      (*k_scale)[u * row + c] = (uint16_t)((bits + 0x8000u) >> 16); /* rounded to bf16, then coded against it */
      const float scale = bf16_value((*k_scale)[u * row + c]);
      for (int64_t t = 0; t < block_size; ++t) {
        const int64_t i = (u * block_size + t) * row + c;
        const long code = lrintf(k[i] / scale);
        (*k_codes)[i] = (int8_t)(code > 127 ? 127 : code < -127 ? -127 : code);
        k[i] = (*k_codes)[i] * scale;
      }
    }
  for (int64_t r = 0; r < units * block_size * kv_heads; ++r) { /* one value row of one token and kv head */
    float top = 0.0f;
    for (int64_t j = 0; j < d; ++j) top = fmaxf(top, fabsf(v[r * d + j]));
    const float scale = (*v_scale)[r] = top > 0.0f ? top / 127.0f : 1.0f;
    for (int64_t j = 0; j < d; ++j) {
      (*v_codes)[r * d + j] = (int8_t)lrintf(v[r * d + j] / scale);
      v[r * d + j] = (*v_codes)[r * d + j] * scale;
    }
  }
}

/* A batch of `seqs` rows over a pool of shuffled blocks stored as `format` (KV_F32, KV_I8): rows [0, shared_rows)
 * share their first `shared_blocks` blocks (one prefix group, when shared_rows > 1), the others have their own;
 * lengths ragged. */
static void check_paged_decode(int format, int64_t seqs, int64_t heads, int64_t kv_heads, int64_t d,
                               int64_t block_size, int64_t shared_rows, int64_t shared_blocks, int with_mass,
                               float q_range) {
  const int64_t width = shared_blocks + 6, units = seqs * width + 1;
  float *k = randoms(units * block_size * kv_heads * d, 1.0f), *v = randoms(units * block_size * kv_heads * d, 1.0f);
  int8_t *k_codes = NULL, *v_codes = NULL;
  uint16_t* k_scale = NULL;
  float* v_scale = NULL;
  if (format == KV_I8) int8_view(k, v, units, block_size, kv_heads, d, &k_codes, &v_codes, &k_scale, &v_scale);
  float* q = randoms(seqs * heads * d, q_range);
  int64_t *tables = malloc((size_t)(seqs * width) * sizeof(int64_t)), *lengths = malloc((size_t)seqs * sizeof(int64_t));
  int64_t* order = malloc((size_t)units * sizeof(int64_t));
  for (int64_t i = 0; i < units; ++i) order[i] = i;
  for (int64_t i = units - 1; i > 0; --i) { /* shuffled: a context's blocks are anywhere in the pool */
    const int64_t j = (int64_t)((uniform() + 1.0f) / 2.0f * (float)(i + 1)) % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  int64_t next = 0, max_length = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < width; ++b)
      tables[s * width + b] = s < shared_rows && b < shared_blocks ? order[b] : order[shared_blocks + next++];
    const int64_t own = 1 + (s * 7 + 3) % ((width - shared_blocks - 1) * block_size); /* ragged, >= 1 own token */
    lengths[s] = (s < shared_rows ? shared_blocks * block_size : 0) + own;
    max_length = lengths[s] > max_length ? lengths[s] : max_length;
  }
  const int64_t grouped = shared_rows > 1 && shared_blocks > 0;
  int64_t group_rows[64], group_starts[2] = {0, grouped ? shared_rows : 0}, group_blocks[1] = {shared_blocks};
  for (int64_t s = 0; s < shared_rows && s < 64; ++s) group_rows[s] = s;
  float *out = calloc((size_t)(seqs * heads * d), sizeof(float)), *mass = calloc((size_t)(seqs * width), sizeof(float));
  const float scale = 1.0f / sqrtf((float)d);
  const void *k_view = format == KV_I8 ? (const void*)k_codes : k, *v_view = format == KV_I8 ? (const void*)v_codes : v;
  PagedDecode a = {q, k_view, v_view, tables, lengths, out, with_mass ? mass : NULL, NULL, group_rows, group_starts,
                   group_blocks, k_scale, v_scale, seqs, heads, kv_heads, d, block_size, width, max_length, grouped,
                   format, scale};
  a.scratch = malloc((size_t)paged_decode_scratch(&a) * sizeof(float));
  paged_decode(&a, THREADS);
  double *want = calloc((size_t)(seqs * heads * d), sizeof(double)), *want_mass = calloc((size_t)(seqs * width), sizeof(double));
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t h = 0; h < heads; ++h)
      reference_attention(q + (s * heads + h) * d, k, v, tables + s * width, lengths[s], block_size, kv_heads,
                          h / (heads / kv_heads), d, scale, want + (s * heads + h) * d, want_mass + s * width);
  char what[128];
  snprintf(what, sizeof what, "paged_decode %s seqs=%lld heads=%lld/%lld d=%lld block=%lld shared=%lldx%lld q<%g%s",
           format == KV_I8 ? "int8" : "fp32", (long long)seqs, (long long)heads, (long long)kv_heads, (long long)d,
           (long long)block_size, (long long)(grouped ? shared_rows : 0), (long long)shared_blocks, q_range,
           with_mass ? " +mass" : "");
  /* fp32 scores carry a rounding error in proportion to their size, and so do the weights made of them */
  expect_close(what, out, want, seqs * heads * d, 1e-6 * q_range, 2e-6 * q_range);
  if (with_mass) expect_close("  its block mass", mass, want_mass, seqs * width, 2e-6 * q_range, 2e-6 * q_range);
  free(k), free(v), free(q), free(tables), free(lengths), free(order), free(out), free(mass), free(a.scratch);
  free(want), free(want_mass), free(k_codes), free(v_codes), free(k_scale), free(v_scale);
}

/* y = W x for W [n, k] (double accumulation) */
static void ref_matvec(const float* w, const double* x, double* y, int64_t n, int64_t k) {
  for (int64_t r = 0; r < n; ++r) {
    y[r] = 0.0;
    for (int64_t j = 0; j < k; ++j) y[r] += (double)w[r * k + j] * x[j];
  }
}

/* The same for an int8 product of one row, which reads x coded to int16 (coded_i16, from x rounded to fp32): a code
 * may still round the other way than the kernel's, whose fp32 input differs from this one in its last bits. */
static void ref_matvec_coded(const float* w, const double* x, double* y, int64_t n, int64_t k) {
  float* rounded = malloc((size_t)k * sizeof(float));
  for (int64_t j = 0; j < k; ++j) rounded[j] = (float)x[j];
  double* coded = coded_i16(rounded, k);
  ref_matvec(w, coded, y, n, k);
  free(rounded), free(coded);
}

static void ref_rms_norm(const double* x, const float* w, double* y, int64_t n, float eps) {
  double squares = 0.0;
  for (int64_t j = 0; j < n; ++j) squares += x[j] * x[j];
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] / sqrt(squares / n + eps) * w[j];
}

static const void* const* stored_of(const RowLayer* layer, int p) {
  const void* const* all[] = {&layer->qkv, &layer->o, &layer->gate_up, &layer->down};
  return all[p];
}

/* The decode tokens of `rows` sequences through a two-layer Llama (or, ACT_GELU_TANH, Gemma) stack (GQA, q/k/v bias,
 * projections stored as `format`): row r at position length + 3r - 1 of its own paged context, its blocks interleaved
 * with the other rows' in one pool. Rows are independent, so the reference runs them one after another. */
static void check_decode_rows(int format, int activation, int64_t rows, int64_t heads, int64_t kv_heads, int64_t d,
                              int64_t hidden, int64_t inter, int64_t length) {
  enum { LAYERS = 2 };
  const int64_t block_size = 16, nqkv = (heads + 2 * kv_heads) * d, max_length = length + 3 * (rows - 1);
  const int64_t width = (max_length + block_size - 1) / block_size, units = rows * width + 2;
  const int64_t pool = units * block_size * kv_heads * d;
  const float eps = 1e-6f, scale = 1.0f / sqrtf((float)d);
  RowLayer layers[LAYERS];
  int64_t *tables = malloc((size_t)(rows * width) * sizeof(int64_t)), *lengths = malloc((size_t)rows * sizeof(int64_t));
  int64_t* slots = malloc((size_t)rows * sizeof(int64_t));
  float *cos_ = malloc((size_t)(rows * d) * sizeof(float)), *sin_ = malloc((size_t)(rows * d) * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) {
    lengths[r] = length + 3 * r;
    for (int64_t b = 0; b < width; ++b) tables[r * width + b] = units - 1 - (b * rows + r); /* reverse, interleaved */
    slots[r] = tables[r * width + (lengths[r] - 1) / block_size] * block_size + (lengths[r] - 1) % block_size;
    for (int64_t j = 0; j < d; ++j) {
      const double angle = (lengths[r] - 1) * pow(10000.0, -(double)(2 * (j % (d / 2))) / (double)d);
      cos_[r * d + j] = (float)cos(angle), sin_[r * d + j] = (float)sin(angle);
    }
  }
  float* ref_k[LAYERS];
  float* ref_v[LAYERS];
  float* values[LAYERS][4]; /* each projection's values: qkv, o, gate_up, down */
  for (int l = 0; l < LAYERS; ++l) {
    const float w_scale = 1.0f / sqrtf((float)hidden);
    layers[l] = (RowLayer){randoms(hidden, 0.2f), randoms(nqkv, 0.1f), randoms(hidden, 0.2f),
                           randoms(nqkv * hidden, w_scale), randoms(hidden * heads * d, w_scale),
                           randoms(2 * inter * hidden, w_scale), randoms(hidden * inter, 1.0f / sqrtf((float)inter)),
                           randoms(pool, 1.0f), randoms(pool, 1.0f), NULL, NULL, NULL, NULL};
    /* the kernel reads `format` rows; the reference (values[]) the numbers they stand for */
    float** scales[] = {(float**)&layers[l].qkv_scale, (float**)&layers[l].o_scale, (float**)&layers[l].gate_up_scale,
                        (float**)&layers[l].down_scale};
    const void** stored[] = {&layers[l].qkv, &layers[l].o, &layers[l].gate_up, &layers[l].down};
    const int64_t shapes[][2] = {{nqkv, hidden}, {hidden, heads * d}, {2 * inter, hidden}, {hidden, inter}};
    for (int p = 0; p < 4; ++p) {
      values[l][p] = (float*)*stored[p];
      *stored[p] = weights_of(format, shapes[p][0], shapes[p][1], values[l][p], scales[p]);
    }
    for (int64_t j = 0; j < hidden; ++j) ((float*)layers[l].input_norm)[j] += 1.0f, ((float*)layers[l].post_norm)[j] += 1.0f;
    ref_k[l] = malloc((size_t)pool * sizeof(float)), ref_v[l] = malloc((size_t)pool * sizeof(float));
    memcpy(ref_k[l], layers[l].k_cache, (size_t)pool * sizeof(float));
    memcpy(ref_v[l], layers[l].v_cache, (size_t)pool * sizeof(float));
  }
  float* h = randoms(rows * hidden, 1.0f);
  double* want = malloc((size_t)(rows * hidden) * sizeof(double));
  for (int64_t j = 0; j < rows * hidden; ++j) want[j] = h[j];
  double *x = malloc((size_t)hidden * sizeof(double)), *qkv = malloc((size_t)nqkv * sizeof(double));
  double *attn = malloc((size_t)(heads * d) * sizeof(double)), *tmp = malloc((size_t)hidden * sizeof(double));
  double *gate_up = malloc((size_t)(2 * inter) * sizeof(double)), *act = malloc((size_t)inter * sizeof(double));
  float* qf = malloc((size_t)(heads * d) * sizeof(float));
  double* mass_want = calloc((size_t)(rows * width), sizeof(double)); /* each row's blocks, over heads and layers */
  const int coded = format == WEIGHTS_I8 && rows == 1; /* its products code their one input row to int16 */
  void (*product)(const float*, const double*, double*, int64_t, int64_t) = coded ? ref_matvec_coded : ref_matvec;
  for (int64_t r = 0; r < rows; ++r) {
    double* hr = want + r * hidden;
    const float *c = cos_ + r * d, *sn = sin_ + r * d;
    const int64_t slot = slots[r];
    for (int l = 0; l < LAYERS; ++l) {
      const RowLayer* L = layers + l;
      ref_rms_norm(hr, L->input_norm, x, hidden, eps);
      product(values[l][0], x, qkv, nqkv, hidden);
      for (int64_t j = 0; j < nqkv; ++j) qkv[j] += L->qkv_bias[j];
      for (int64_t hd = 0; hd < heads + kv_heads; ++hd) { /* rotate-half RoPE on q and k */
        double* q = qkv + hd * d;
        for (int64_t j = 0; j < d / 2; ++j) {
          const double a = q[j], b = q[j + d / 2];
          q[j] = a * c[j] - b * sn[j], q[j + d / 2] = b * c[j + d / 2] + a * sn[j + d / 2];
        }
      }
      for (int64_t j = 0; j < kv_heads * d; ++j)
        ref_k[l][slot * kv_heads * d + j] = (float)qkv[heads * d + j],
                           ref_v[l][slot * kv_heads * d + j] = (float)qkv[(heads + kv_heads) * d + j];
      for (int64_t j = 0; j < heads * d; ++j) qf[j] = (float)qkv[j];
      for (int64_t hd = 0; hd < heads; ++hd)
        reference_attention(qf + hd * d, ref_k[l], ref_v[l], tables + r * width, lengths[r], block_size, kv_heads,
                            hd / (heads / kv_heads), d, scale, attn + hd * d, mass_want + r * width);
      product(values[l][1], attn, tmp, hidden, heads * d);
      for (int64_t j = 0; j < hidden; ++j) hr[j] += tmp[j];
      ref_rms_norm(hr, L->post_norm, x, hidden, eps);
      product(values[l][2], x, gate_up, 2 * inter, hidden);
      for (int64_t j = 0; j < inter; ++j) {
        const double g = gate_up[j];
        act[j] = (activation == ACT_GELU_TANH ? 0.5 * g * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (g + 0.044715 * g * g * g)))
                                              : g / (1.0 + exp(-g))) * gate_up[inter + j];
      }
      product(values[l][3], act, tmp, hidden, inter);
      for (int64_t j = 0; j < hidden; ++j) hr[j] += tmp[j];
    }
  }
  const RowModel model = {LAYERS, hidden, heads, kv_heads, d, inter, block_size, format, activation, eps, scale};
  float* mass = calloc((size_t)(rows * width), sizeof(float));
  RowStep step = {h, cos_, sin_, tables, lengths, slots, mass, NULL, rows, width, max_length};
  step.scratch = malloc((size_t)decode_rows_scratch(&model, rows, max_length) * sizeof(float));
  decode_rows(&model, layers, &step, THREADS);
  char what[112];
  snprintf(what, sizeof what, "decode_rows %s%s rows=%lld heads=%lld/%lld d=%lld hidden=%lld inter=%lld length=%lld",
           FORMAT_NAMES[format], activation == ACT_GELU_TANH ? " geglu" : "", (long long)rows, (long long)heads,
           (long long)kv_heads, (long long)d, (long long)hidden, (long long)inter, (long long)length);
  /* coded: the kernel codes its own fp32 inputs, which differ from the reference's in their last bits, so a code here
   * and there rounds the other way (1/32767 of its group's largest input), and that moves the next layers' inputs:
   * measured up to 1.6e-5 in the output and 3.3e-5 in the keys and values (check_matvec checks the codes exactly) */
  const double tolerance = coded ? 1e-4 : 2e-6;
  expect_close(what, h, want, rows * hidden, tolerance, tolerance);
  const int64_t row_kv = 2 * kv_heads * d;
  double* kv_want = malloc((size_t)(rows * row_kv) * sizeof(double));
  float* kv_got = malloc((size_t)(rows * row_kv) * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) { /* each token's key and value in the last layer's pool, at its own slot */
    const int64_t at = slots[r] * kv_heads * d, to = r * row_kv, half = kv_heads * d;
    for (int64_t j = 0; j < half; ++j) {
      kv_want[to + j] = ref_k[LAYERS - 1][at + j], kv_want[to + half + j] = ref_v[LAYERS - 1][at + j];
      kv_got[to + j] = layers[LAYERS - 1].k_cache[at + j], kv_got[to + half + j] = layers[LAYERS - 1].v_cache[at + j];
    }
  }
  expect_close("  the rows' keys and values in the last layer's pool", kv_got, kv_want, rows * row_kv, tolerance, tolerance);
  expect_close("  the rows' attention mass per block", mass, mass_want, rows * width, 2e-6, 2e-6);
  for (int l = 0; l < LAYERS; ++l) {
    free((void*)layers[l].input_norm), free((void*)layers[l].qkv_bias), free((void*)layers[l].post_norm);
    for (int p = 0; p < 4; ++p) {
      if (*stored_of(&layers[l], p) != values[l][p]) free((void*)*stored_of(&layers[l], p));
      free(values[l][p]);
    }
    free((void*)layers[l].qkv_scale), free((void*)layers[l].o_scale), free((void*)layers[l].gate_up_scale);
    free((void*)layers[l].down_scale);
    free(layers[l].k_cache), free(layers[l].v_cache), free(ref_k[l]), free(ref_v[l]);
  }
  free(tables), free(lengths), free(slots), free(cos_), free(sin_), free(h), free(want), free(x), free(qkv);
  free(attn), free(tmp), free(gate_up), free(act), free(qf), free(step.scratch), free(kv_want), free(kv_got);
  free(mass), free(mass_want);
}

int main(void) {
  printf("isa %s\n", oxygen_isa());
  for (int format = WEIGHTS_F32; format <= WEIGHTS_I8; ++format) {
    for (int64_t m = 1; m <= 8; ++m) {
      check_matvec(format, m, 9 + m, 1 + 37 * m); /* k: 38 .. 297, rarely a multiple of 16 */
      check_matvec(format, m, 16, 64);
    }
    check_matvec(format, 1, 1, 1);
    check_matvec(format, 3, 33, 15);
  }
  for (int64_t m = 1; m <= 8; ++m) check_matvec(WEIGHTS_Q4_1, m, 9 + m, 32 * m); /* rows in whole blocks */
  check_matvec(WEIGHTS_Q4_1, 1, 1, 32);
  check_matvec(WEIGHTS_Q4_1, 2, 33, 576);
  check_row_ops(3, 37, 2.0f);
  check_row_ops(5, 64, 2.0f);
  check_row_ops(2, 40, 120.0f); /* SiLU's e^-g from e^-120 to e^120: exp's clamp and the far ends of its scaling */
  check_rotate_half(3, 4, 16);
  check_rotate_half(2, 2, 64);
  /* head_dim 16 .. 256 (one to sixteen vectors a head), GQA groups 1 .. 4, blocks of 16 and 32, prefixes */
  const int64_t shapes[][5] = {{4, 4, 16, 16, 0}, {6, 2, 64, 16, 0}, {8, 2, 80, 16, 0}, {2, 1, 128, 32, 0},
                               {8, 1, 256, 16, 0}, {9, 3, 64, 16, 1}, {4, 1, 256, 16, 1}, {6, 2, 48, 32, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    const int64_t* s = shapes[i];
    check_paged_decode(KV_F32, 5, s[0], s[1], s[2], s[3], s[4] ? 4 : 0, s[4] ? 3 : 0, (int)(i % 2), 1.0f);
  }
  check_paged_decode(KV_F32, 3, 6, 2, 64, 16, 3, 2, 1, 1.0f);
  check_paged_decode(KV_F32, 5, 4, 2, 64, 8, 4, 3, 1, 1.0f); /* a 24-token prefix: a partial chunk, read row by row */
  check_paged_decode(KV_F32, 4, 4, 2, 64, 16, 3, 2, 1, 30.0f); /* scores of tens: weights down to e^-87 (clamped) */
  /* int8 codes and scales read in place: GQA, head sizes 16 to 256, units of 16 and 4, a prefix group (not read) */
  check_paged_decode(KV_I8, 5, 4, 4, 16, 16, 0, 0, 1, 1.0f);
  check_paged_decode(KV_I8, 5, 6, 2, 64, 16, 3, 2, 1, 1.0f);
  check_paged_decode(KV_I8, 4, 3, 3, 128, 4, 0, 0, 0, 1.0f);
  check_paged_decode(KV_I8, 3, 8, 1, 256, 16, 0, 0, 1, 1.0f);
  for (int format = WEIGHTS_F32; format <= WEIGHTS_Q4_1; ++format) {
    check_decode_rows(format, ACT_SILU, 1, 4, 2, 32, 96, 160, 37);
    check_decode_rows(format, ACT_SILU, 1, 6, 2, 64, 128, format == WEIGHTS_Q4_1 ? 224 : 200, 16); /* Q4_1: whole blocks */
    check_decode_rows(format, ACT_SILU, 3, 4, 2, 32, 96, 160, 15); /* a row per thread and one more; lengths 15, 18, 21 */
  }
  for (int64_t rows = 2; rows <= 8; rows += 3) check_decode_rows(WEIGHTS_F32, ACT_SILU, rows, 6, 2, 64, 128, 200, 30);
  check_decode_rows(WEIGHTS_F32, ACT_GELU_TANH, 1, 8, 1, 256, 128, 200, 37); /* Gemma's: MQA, head_dim 256, GeGLU */
  check_decode_rows(WEIGHTS_F32, ACT_GELU_TANH, 5, 8, 1, 256, 128, 200, 37);
  check_decode_rows(WEIGHTS_BF16, ACT_GELU_TANH, 1, 4, 1, 64, 96, 160, 16);
  printf("all %d checks passed on %s\n", checks, oxygen_isa());
  return 0;
}
