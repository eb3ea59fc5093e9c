// The online softmax of a score tile two 16-row blocks at a time, with the
// probabilities handed to a consumer; shared by the fp16-arithmetic softmax
// (half_softmax.h) and the pair-layout tile path's softmax fused with the
// packing of P (bf16_pair_path.h).  AVX-512F only.  Included by those
// headers inside the path's namespace, after engines.h's helpers.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace fa::FA_KERNEL_NS {

// The online softmax of a score tile (Sᵀ [keys][tq], times `scale`) two
// 16-row blocks at a time, the shape 32-lane fp16 vectors want.  The max pass
// and the state update (max, sum, alpha) are here; `probabilities(xa, xb,
// pa, pb)` turns key c's max-subtracted scores of both blocks into
// probabilities, and `emit(j, pair, c, pa, pb)` consumes them, for c up to
// `keys` (>= cols; keys past `cols` have probability 0).
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
    // The max over keys in two chains a block: one block (a tile of at most
    // 16 rows, as decoding's) would otherwise wait on VMAXPS's latency key
    // after key.
    __m512 max_a = neg_inf, max_b = neg_inf, max_a2 = neg_inf, max_b2 = neg_inf;
    int c = 0;
    for (; c + 2 <= cols; c += 2) {
      max_a = _mm512_max_ps(max_a, _mm512_loadu_ps(col_a + std::int64_t(c) * tq));
      max_a2 = _mm512_max_ps(max_a2, _mm512_loadu_ps(col_a + std::int64_t(c + 1) * tq));
      if (pair) {
        max_b = _mm512_max_ps(max_b, _mm512_loadu_ps(col_b + std::int64_t(c) * tq));
        max_b2 = _mm512_max_ps(max_b2, _mm512_loadu_ps(col_b + std::int64_t(c + 1) * tq));
      }
    }
    if (c < cols) {
      max_a = _mm512_max_ps(max_a, _mm512_loadu_ps(col_a + std::int64_t(c) * tq));
      if (pair) max_b = _mm512_max_ps(max_b, _mm512_loadu_ps(col_b + std::int64_t(c) * tq));
    }
    max_a = _mm512_max_ps(max_a, max_a2);
    max_b = _mm512_max_ps(max_b, max_b2);
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

}  // namespace fa::FA_KERNEL_NS
