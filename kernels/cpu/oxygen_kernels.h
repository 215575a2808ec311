/* The C interface of the CPU kernels: every struct Python passes in (mirrored field for field by ctypes in
 * kernels/cpu_abi.py) and every function it calls. Declared here only, so the kernels and abi.c, which reports the
 * structs' sizes and offsets for the mirrors to be checked against when the library loads, see one layout.
 */
#pragma once
#include <stdint.h>

/* How a pool view stores K and V: fp32, or int8 codes with a bf16 scale per (unit, kv head, channel) for keys (over
 * the unit's tokens) and an fp32 scale per (token, kv head) for values (kernels/quant_spec.py's int8). */
enum { KV_F32 = 0, KV_I8 = 1 };

/* A batch's decode attention (paged_decode.c): one query per sequence and head over each sequence's paged context,
 * the prefix groups whose shared leading blocks are attended together, and where the outputs go. */
typedef struct {
  const float* q;              /* [seqs, heads, head_dim] */
  const void *k, *v;           /* the layer's pool view [units, block_size, kv_heads, head_dim], as kv_format says */
  const int64_t* tables;       /* [seqs, width] */
  const int64_t* lengths;      /* [seqs] */
  float* out;                  /* [seqs, heads, head_dim] */
  float* block_mass;           /* [seqs, width] or NULL */
  float* scratch;              /* paged_decode_scratch floats */
  const int64_t* group_rows;   /* the rows of every group, group after group */
  const int64_t* group_starts; /* [groups + 1]: group g's rows are group_rows[group_starts[g] ..) */
  const int64_t* group_blocks; /* [groups]: leading blocks its rows share (their ids: its first row's table) */
  const uint16_t* k_scale;     /* KV_I8: bf16 [units, kv_heads, head_dim]; else NULL */
  const float* v_scale;        /* KV_I8: [units, block_size, kv_heads]; else NULL */
  int64_t seqs, heads, kv_heads, head_dim, block_size, width, max_length, groups;
  int64_t kv_format;           /* KV_F32, or KV_I8 (its rows attend their whole context: groups are not read) */
  float scale;
} PagedDecode;

/* How a weight matrix's rows are stored (row-major [out, in]): fp32, bf16 (widened exactly as read), int8 with one
 * fp32 scale per I8_GROUP weights of a row (llama.cpp's Q8_0 grouping; scales [out, ceil(in / I8_GROUP)]), or GGUF
 * Q4_1 blocks as llama.cpp writes them: per Q4_1_GROUP weights of a row (in a multiple of it) Q4_1_BYTES bytes, an
 * fp16 scale d, an fp16 minimum m and 16 bytes whose low nibbles are weights 0-15 and high nibbles 16-31, each
 * weight d * q + m (no separate scales). */
enum { WEIGHTS_F32 = 0, WEIGHTS_BF16 = 1, WEIGHTS_I8 = 2, WEIGHTS_Q4_1 = 3 };
#define I8_GROUP 32
#define Q4_1_GROUP 32
#define Q4_1_BYTES 20

typedef struct { /* one decoder layer: fp32 norms and bias, row-major projections, its pool view, int8 scales */
  const float *input_norm, *qkv_bias, *post_norm;
  const void *qkv, *o, *gate_up, *down;
  float *k_cache, *v_cache;
  const float *qkv_scale, *o_scale, *gate_up_scale, *down_scale; /* int8 group scales; NULL for other formats */
} RowLayer;

/* The gated MLP's activation: SwiGLU's SiLU (Llama, Qwen, SmolLM) or GeGLU's tanh-approximated GELU (Gemma: pi0 /
 * pi0.5's backbone). */
enum { ACT_SILU = 0, ACT_GELU_TANH = 1 };

typedef struct { /* the decoder stack's shape (llama_decode_row.c), the same for every token */
  int64_t layers, hidden, heads, kv_heads, head_dim, intermediate, block_size;
  int64_t weight_format; /* the projections' storage: WEIGHTS_F32, _BF16, _I8 or _Q4_1 */
  int64_t activation;    /* ACT_SILU or ACT_GELU_TANH */
  float eps, scale;
} RowModel;

typedef struct { /* the step: each row's token (its hidden state, updated in place) and where its context lives */
  float* h;                       /* [rows, hidden] */
  const float *cos, *sin;         /* [rows, head_dim] at each token's position */
  const int64_t* tables;          /* [rows, width]: each row's block ids */
  const int64_t *lengths, *slots; /* [rows]: context tokens including the row's; its flat pool slot */
  float* block_mass;              /* [rows, width] or NULL */
  float* scratch;                 /* decode_rows_scratch floats */
  int64_t rows, width, max_length; /* rows 1 .. STREAMED_MAX_INPUTS; max_length >= every length */
} RowStep;

/* abi.c */
int64_t oxygen_abi(int64_t* out, int64_t capacity, const char** names);
const char* oxygen_isa(void);

/* matvec.c */
void matvec(const void* w, int weight_format, const float* scales, const float* x, float* y, int64_t m, int64_t n,
            int64_t k, int threads);

/* llama_decode_row.c */
int64_t decode_rows_scratch(const RowModel* m, int64_t rows, int64_t max_length);
void decode_rows(const RowModel* m, const RowLayer* layers, const RowStep* s, int threads);

/* paged_decode.c */
int64_t paged_decode_scratch(const PagedDecode* a);
void paged_decode(const PagedDecode* a, int threads);

/* row_ops.c */
void add_rms_norm_f32(const float* h, const float* delta, float* sum, const float* w, float* out, int64_t rows,
                      int64_t n, float eps, int threads);
void rotate_half_f32(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, const float* cos,
                     const float* sin, int threads);
void silu_mul_f32(const float* gate_up, float* out, int64_t rows, int64_t inter, int threads);
