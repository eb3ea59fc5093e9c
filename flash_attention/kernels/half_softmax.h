// FA_MIXED_PRECISION_SOFTMAX=OFF: the softmax of fp16 inputs in fp16
// arithmetic (AVX512-FP16, 32 lanes per vector), on the amx path.  Included
// by fa2_tile_loop.h inside that path's namespace when FA_HAVE_AVX512FP16 is
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

namespace fa::FA_KERNEL_NS {

// 2^x in fp16 for x <= 0: x = n + f with f in [-0.5, 0.5], 2^f by its Taylor
// series to degree 4 (relative error 4e-5, below half an fp16 ulp), then
// scaled by 2^n with VSCALEFPH, which underflows to 0 gracefully.  Arguments
// below -30 (-inf included) are clamped there: 2^-30 is 0 in fp16.
inline __m512h exp2_half(__m512h x) {
  x = _mm512_max_ph(x, _mm512_set1_ph(static_cast<_Float16>(-30.0f)));
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

// The online softmax of a score tile (Sᵀ [keys][tq], times `scale`) two
// 16-row blocks at a time, the shape 32-lane fp16 vectors want.  The max pass
// and the state update (max, sum, alpha) are here; `probabilities(xa, xb,
// pa, pb)` turns key c's max-subtracted scores of both blocks into
// probabilities, and `emit(j, pair, c, pa, pb)` consumes them, for c up to
// `keys` (>= cols; keys past `cols` have probability 0).  Shared by the fp16
// softmax below and the amx path's softmax fused with the packing of P.
// `slack` (log2 units, >= 0): a row keeps its running max as long as the
// tile's max exceeds it by at most this much, so its probabilities reach
// 2^slack at most, its alpha is exactly 1 and Oᵀ needs no rescale (the max
// of a long row keeps creeping up, which would otherwise rescale Oᵀ on
// nearly every tile).  0: the max always follows (probabilities <= 1, as the
// fp16 exp2 needs).
template <class Probabilities, class Emit>
inline void two_block_softmax(const Workspace& w, int cols, int keys, int nvec, int tq, float scale, float slack,
                              Probabilities&& probabilities, Emit&& emit) {
  const __m512 vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(kNegInf), zero = _mm512_setzero_ps();
  for (int j = 0; j < nvec; j += 2) {
    const bool pair = j + 1 < nvec;  // else only the first block (the second reads as zeros)
    const float* col_a = w.st + j * 16;
    const float* col_b = col_a + 16;
    __m512 max_a = neg_inf, max_b = neg_inf;
    for (int c = 0; c < cols; ++c) {
      max_a = _mm512_max_ps(max_a, _mm512_loadu_ps(col_a + std::int64_t(c) * tq));
      if (pair) max_b = _mm512_max_ps(max_b, _mm512_loadu_ps(col_b + std::int64_t(c) * tq));
    }
    const __m512 m_old_a = _mm512_loadu_ps(w.m + j * 16), m_old_b = pair ? _mm512_loadu_ps(w.m + j * 16 + 16) : neg_inf;
    const __m512 vslack = _mm512_set1_ps(slack);
    auto updated_max = [&](__m512 m_old, __m512 tile_max) {
      const __m512 m = _mm512_max_ps(m_old, _mm512_mul_ps(tile_max, vscale));
      // -inf + slack stays -inf: a row that has seen nothing takes the max.
      return _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(m, _mm512_add_ps(m_old, vslack), _CMP_LE_OQ), m_old);
    };
    const __m512 m_new_a = updated_max(m_old_a, max_a);
    const __m512 m_new_b = updated_max(m_old_b, max_b);
    // A row that has seen no attendable key subtracts 0 (see online_softmax_tile).
    const __m512 m_sub_a = Vec::zero_if_neg_inf(m_new_a), m_sub_b = Vec::zero_if_neg_inf(m_new_b);
    const __m512 neg_a = _mm512_sub_ps(zero, m_sub_a), neg_b = _mm512_sub_ps(zero, m_sub_b);
    __m512 sum_a = zero, sum_b = zero;
    for (int c = 0; c < keys; ++c) {
      __m512 pa = zero, pb = zero;
      if (c < cols) {
        const __m512 xa = _mm512_fmadd_ps(_mm512_loadu_ps(col_a + std::int64_t(c) * tq), vscale, neg_a);
        const __m512 xb = pair ? _mm512_fmadd_ps(_mm512_loadu_ps(col_b + std::int64_t(c) * tq), vscale, neg_b) : zero;
        probabilities(xa, xb, pa, pb);
        if (!pair) pb = zero;
      }
      sum_a = _mm512_add_ps(sum_a, pa);
      sum_b = _mm512_add_ps(sum_b, pb);
      emit(j, pair, c, pa, pb);
    }
    const __m512 alpha_a = Vec::exp2(_mm512_sub_ps(m_old_a, m_sub_a));
    _mm512_storeu_ps(w.alpha + j * 16, alpha_a);
    _mm512_storeu_ps(w.l + j * 16, _mm512_fmadd_ps(_mm512_loadu_ps(w.l + j * 16), alpha_a, sum_a));
    _mm512_storeu_ps(w.m + j * 16, m_new_a);
    if (pair) {
      const __m512 alpha_b = Vec::exp2(_mm512_sub_ps(m_old_b, m_sub_b));
      _mm512_storeu_ps(w.alpha + j * 16 + 16, alpha_b);
      _mm512_storeu_ps(w.l + j * 16 + 16, _mm512_fmadd_ps(_mm512_loadu_ps(w.l + j * 16 + 16), alpha_b, sum_b));
      _mm512_storeu_ps(w.m + j * 16 + 16, m_new_b);
    }
  }
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
