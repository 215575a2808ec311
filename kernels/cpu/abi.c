/* The layout of every struct in oxygen_kernels.h as this build compiled it, for kernels/cpu_abi.py to compare its
 * ctypes mirrors with when the library loads: a stale or mismatched build is never called with a wrong layout.
 *
 * The values, in this order: for each struct in STRUCTS, its sizeof, then the offsetof of each of its fields in
 * declaration order; then the value of each of the header's enum members and sizes in CONSTANTS. Each value has a
 * name, space separated in the same order: "PagedDecode" for a size, "PagedDecode.q" for an offset, "const.KV_I8" for
 * a constant; by name, a mirror's swapped fields are found even where they have the same size.
 */
#include <stddef.h>

#include "oxygen_kernels.h"
#include "vector.h"

#define STRUCTS(S) S(PagedDecode) S(RowLayer) S(RowModel) S(RowStep)
#define FIELDS_PagedDecode(F, T)                                                                                     \
  F(T, q) F(T, k) F(T, v) F(T, tables) F(T, lengths) F(T, out) F(T, block_mass) F(T, scratch) F(T, group_rows)      \
  F(T, group_starts) F(T, group_blocks) F(T, k_scale) F(T, v_scale) F(T, seqs) F(T, heads) F(T, kv_heads)         \
  F(T, head_dim) F(T, block_size) F(T, width) F(T, max_length) F(T, groups) F(T, kv_format) F(T, scale)
#define FIELDS_RowLayer(F, T)                                                                                        \
  F(T, input_norm) F(T, qkv_bias) F(T, post_norm) F(T, qkv) F(T, o) F(T, gate_up) F(T, down) F(T, k_cache)          \
  F(T, v_cache) F(T, qkv_scale) F(T, o_scale) F(T, gate_up_scale) F(T, down_scale)
#define FIELDS_RowModel(F, T)                                                                                        \
  F(T, layers) F(T, hidden) F(T, heads) F(T, kv_heads) F(T, head_dim) F(T, intermediate) F(T, block_size)           \
  F(T, weight_format) F(T, activation) F(T, eps) F(T, scale)
#define FIELDS_RowStep(F, T)                                                                                         \
  F(T, h) F(T, cos) F(T, sin) F(T, tables) F(T, lengths) F(T, slots) F(T, block_mass) F(T, scratch) F(T, rows)     \
  F(T, width) F(T, max_length)

#define CONSTANTS(C)                                                                                                 \
  C(KV_F32) C(KV_I8) C(WEIGHTS_F32) C(WEIGHTS_BF16) C(WEIGHTS_I8) C(WEIGHTS_Q4_1) C(I8_GROUP) C(Q4_1_GROUP) C(Q4_1_BYTES) \
  C(ACT_SILU) C(ACT_GELU_TANH) C(STREAMED_MAX_INPUTS)

#define OFFSET(T, field) offsetof(T, field),
#define FIELD_NAME(T, field) #T "." #field " "
#define SIZE_AND_OFFSETS(T) sizeof(T), FIELDS_##T(OFFSET, T)
#define NAMES(T) #T " " FIELDS_##T(FIELD_NAME, T)

#define VALUE(name) name,
#define CONSTANT_NAME(name) "const." #name " "

static const int64_t layout[] = {STRUCTS(SIZE_AND_OFFSETS) CONSTANTS(VALUE)};
static const char layout_names[] = STRUCTS(NAMES) CONSTANTS(CONSTANT_NAME);

/* Writes the first `capacity` values to out and points *names at their names; returns how many values there are. */
int64_t oxygen_abi(int64_t* out, int64_t capacity, const char** names) {
  const int64_t count = sizeof(layout) / sizeof(layout[0]);
  for (int64_t i = 0; i < count && i < capacity; ++i) out[i] = layout[i];
  *names = layout_names;
  return count;
}

/* The instruction set this build's vectors use (simd.h): what cpu_library.loaded_isa reports. */
const char* oxygen_isa(void) { return SIMD_ISA; }
