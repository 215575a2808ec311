/* y = W x for fp32 W [n, k] row-major and x [k]: the batch-1 decode step's weight read, streamed.
 *
 * Eight rows at a time, each accumulated in one AVX-512 register, x read from L1: the weight is read once, in order,
 * with nothing else in the way, so the product runs at the rate the cores can pull memory (the hardware prefetcher
 * sees eight sequential streams). Rows are split over OpenMP threads in contiguous ranges. A k that is no multiple
 * of 16 ends with a masked load; a last block of fewer than eight rows reads only its own rows.
 */
#include <immintrin.h>
#include <stdint.h>
#include <omp.h>
#define R 8 /* rows per block: 8 accumulators + x + loads fit the 32 vector registers */
void matvec_f32(const float* w, const float* x, float* y, int64_t n, int64_t k, int threads) {
  const int64_t blocks = (n + R - 1) / R;
  const __mmask16 tail = (__mmask16)((1u << (k % 16)) - 1u);
  const int64_t body = k - k % 16;
  #pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t n0 = b * R;
    const int64_t rows = n - n0 < R ? n - n0 : R;
    const float* base = w + n0 * k;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    if (rows == R) {
      for (int64_t j = 0; j < body; j += 16) {
        const __m512 xv = _mm512_loadu_ps(x + j);
        for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(base + r * k + j), xv, acc[r]);
      }
    } else {
      for (int64_t j = 0; j < body; j += 16) {
        const __m512 xv = _mm512_loadu_ps(x + j);
        for (int r = 0; r < rows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(base + r * k + j), xv, acc[r]);
      }
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + body);
      for (int r = 0; r < rows; ++r)
        acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, base + r * k + body), xv, acc[r]);
    }
    for (int r = 0; r < rows; ++r) y[n0 + r] = _mm512_reduce_add_ps(acc[r]);
  }
}
