// FA_MIXED_PRECISION_SOFTMAX=OFF: the softmax of fp16 inputs in fp16
// arithmetic (AVX512-FP16, 32 lanes per vector), on the amx path.  Included
// by engines.h inside that path's namespace when FA_HAVE_AVX512FP16 is
// set; the build option decides whether fp16 calls use it (kHalfSoftmax).
//
// What runs in fp16: exp2 of the max-subtracted scores (the polynomial and
// its range reduction, 32 lanes per instruction), so P is fp16.  What stays
// fp32: the scores out of the product (an fp16 score could overflow: logits
// of 1e5 are not representable), the max and the subtraction (so the fp16
// argument is <= 0 and nothing overflows), and the accumulation: the row
// sums of the fp16 P (an fp16 sum would put fp16 rounding into the LSE and
// the normalization), the running max and sum, and the output.
#pragma once

#include <immintrin.h>

#include "two_block_softmax.h"

namespace fa::FA_KERNEL_NS {

// 2^x in fp16 for x <= 0: x = n + f with f in [-0.5, 0.5], 2^f by its Taylor
// series to degree 4 (relative error 4e-5, below half an fp16 ulp), then
// scaled by 2^n with VSCALEFPH, which underflows to 0 gracefully.  Arguments
// below -30 (-inf included) are clamped there: 2^-30 is 0 in fp16.  NaN
// passes the clamp (VMAXPH returns its second operand when one is NaN) and
// comes out NaN (the NaN rule, README).
inline __m512h exp2_half(__m512h x) {
  x = _mm512_max_ph(_mm512_set1_ph(static_cast<_Float16>(-30.0f)), x);
  const __m512h n = _mm512_roundscale_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512h f = _mm512_sub_ph(x, n);
  __m512h p = _mm512_set1_ph(static_cast<_Float16>(9.6181291e-3f));
  p = _mm512_fmadd_ph(p, f, _mm512_set1_ph(static_cast<_Float16>(5.5504109e-2f)));
  p = _mm512_fmadd_ph(p, f, _mm512_set1_ph(static_cast<_Float16>(2.4022651e-1f)));
  p = _mm512_fmadd_ph(p, f, _mm512_set1_ph(static_cast<_Float16>(6.9314718e-1f)));
  p = _mm512_fmadd_ph(p, f, _mm512_set1_ph(static_cast<_Float16>(1.0f)));
  return _mm512_scalef_ph(p, n);
}

// Two fp32 vectors (lanes 0-15 and 16-31) rounded into one fp16 vector, and back.
inline __m512h join_half(__m512 lo, __m512 hi) {
  const __m256i l = _mm256_castph_si256(_mm512_cvtxps_ph(lo)), h = _mm256_castph_si256(_mm512_cvtxps_ph(hi));
  return _mm512_castsi512_ph(_mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1));
}
inline __m512 low_half(__m512h v) { return _mm512_cvtxph_ps(_mm512_castph512_ph256(v)); }
inline __m512 high_half(__m512h v) {
  return _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(_mm512_castph_si512(v), 1)));
}

// 2^x of two fp32 vectors through one fp16 vector.
inline void exp2_half_pair(__m512 xa, __m512 xb, __m512& pa, __m512& pb) {
  const __m512h p = exp2_half(join_half(xa, xb));
  pa = low_half(p);
  pb = high_half(p);
}

// online_softmax_tile with exp2 in fp16; P back into the tile as fp32.
inline void online_softmax_tile_half(const Workspace& w, int cols, int nvec, int tq, float scale) {
  two_block_softmax(w, cols, cols, nvec, tq, scale, /*slack=*/0.0f, exp2_half_pair,
                    [&](int j, bool pair, int c, __m512 pa, __m512 pb) {
                      float* row = w.st + std::int64_t(c) * tq + j * 16;
                      _mm512_storeu_ps(row, pa);
                      if (pair) _mm512_storeu_ps(row + 16, pb);
                    });
}

// exp2_row with exp2 in fp16: s[c] = 2^(s[c] - sub) for c < n; returns their
// sum, accumulated in fp32.
inline float exp2_row_half(float* s, int n, float sub) {
  const __m512 vsub = _mm512_set1_ps(sub);
  __m512 sum = _mm512_setzero_ps();
  for (int c = 0; c < n; c += 32) {
    alignas(64) float buf[32];
    const int len = n - c < 32 ? n - c : 32;
    for (int k = 0; k < 32; ++k) buf[k] = k < len ? s[c + k] : kNegInf;  // padding: 2^-inf = 0
    const __m512h p = exp2_half(join_half(_mm512_sub_ps(_mm512_load_ps(buf), vsub),
                                          _mm512_sub_ps(_mm512_load_ps(buf + 16), vsub)));
    const __m512 lo = low_half(p), hi = high_half(p);
    sum = _mm512_add_ps(sum, _mm512_add_ps(lo, hi));
    _mm512_store_ps(buf, lo);
    _mm512_store_ps(buf + 16, hi);
    for (int k = 0; k < len; ++k) s[c + k] = buf[k];
  }
  return _mm512_reduce_add_ps(sum);
}

}  // namespace fa::FA_KERNEL_NS
