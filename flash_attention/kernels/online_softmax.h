// The online softmax of the vector paths, one lane per query row: the state
// a row starts from, a tile's max, exp2 and sum with the rescale factor of
// the output (online_softmax_tile; exp2_row for the row path), the scores
// prepared for it (modifiers and masks), and the fp16-arithmetic variant of
// FA_MIXED_PRECISION_SOFTMAX=OFF where the path has AVX512-FP16.
#pragma once

#include "score_modifiers.h"
#include "tile_mask.h"

namespace fa::FA_KERNEL_NS {


// Online softmax over one Sᵀ tile [cols][tq], one vector lane per query row:
// Sᵀ becomes Pᵀ = exp2(S * scale - new max), the running max and sum move,
// and alpha receives each row's rescale factor for the output accumulator.
// The scale (> 0, so the block max scales with the scores) is one fused
// multiply-add per score rather than a separate pass over the tile.
inline void online_softmax_tile(const Workspace& w, int cols, int nvec, int tq, float scale) {
  using T = typename Vec::T;
  constexpr int W = Vec::W;
  const T vscale = Vec::set1(scale);
  for (int j = 0; j < nvec; ++j) {
    float* col = w.st + j * W;
    T block_max = Vec::set1(kNegInf);
    for (int c = 0; c < cols; ++c) block_max = Vec::max(block_max, Vec::load(col + std::int64_t(c) * tq));
    block_max = Vec::mul(block_max, vscale);
    const T m_old = Vec::load(w.m + j * W);
    const T m_new = Vec::max(m_old, block_max);
    // A row that has seen no attendable key keeps max -inf; subtracting 0
    // instead makes its probabilities exp2(-inf) = 0 and its alpha 0.
    const T m_sub = Vec::zero_if_neg_inf(m_new);
    const T neg_m_sub = Vec::sub(Vec::zero(), m_sub);
    T sum = Vec::zero();
    for (int c = 0; c < cols; ++c) {
      const T s = Vec::load(col + std::int64_t(c) * tq);
      const T p = Vec::exp2(Vec::fmadd(s, vscale, neg_m_sub));
      Vec::store(col + std::int64_t(c) * tq, p);
      sum = Vec::add(sum, p);
    }
    const T alpha = Vec::exp2(Vec::sub(m_old, m_sub));
    Vec::store(w.alpha + j * W, alpha);
    Vec::store(w.l + j * W, Vec::fmadd(Vec::load(w.l + j * W), alpha, sum));
    Vec::store(w.m + j * W, m_new);
  }
}


// What a row's output is divided by: its softmax sum, or +inf for a row that
// attended nothing (its accumulator is 0, so it outputs zeros).  A division,
// not a multiplication by the reciprocal: one rounding instead of two.
inline float row_denominator(float l) { return l > 0.0f ? l : __builtin_inff(); }

// A row's log-sum-exp (natural log) from its running max (log2 units) and
// sum: -inf for a row that attended nothing (sum 0), NaN for a row a NaN
// reached (its sum is NaN).
inline float row_lse(float m, float l) { return l == 0.0f ? kNegInf : m * kLn2 + std::log(l); }

// s[c] = exp2(s[c] - sub) for c < n; returns the sum.
inline float exp2_row(float* s, int n, float sub) {
  typename Vec::T total = Vec::zero();
  const typename Vec::T vsub = Vec::set1(sub);
  int c = 0;
  for (; c + Vec::W <= n; c += Vec::W) {
    const typename Vec::T p = Vec::exp2(Vec::sub(Vec::load(s + c), vsub));
    Vec::store(s + c, p);
    total = Vec::add(total, p);
  }
  float sum = Vec::reduce_add(total);
  if (c < n) {
    float buf[Vec::W];
    for (int k = 0; k < Vec::W; ++k) buf[k] = c + k < n ? s[c + k] : kNegInf;
    Vec::store(buf, Vec::exp2(Vec::sub(Vec::load(buf), vsub)));
    for (int k = 0; c + k < n; ++k) {
      s[c + k] = buf[k];
      sum += buf[k];
    }
  }
  return sum;
}
}  // namespace fa::FA_KERNEL_NS

// The fp16-arithmetic softmax of FA_MIXED_PRECISION_SOFTMAX=OFF (amx path).
#if defined(FA_HAVE_AVX512FP16)
#include "half_softmax.h"
#endif

namespace fa::FA_KERNEL_NS {

// Whether fp16 inputs get the fp16-arithmetic softmax: only with
// FA_MIXED_PRECISION_SOFTMAX=OFF, on a path built with AVX512-FP16 (the
// dispatcher refuses fp16 calls of an OFF build on the other paths).
#if defined(FA_HAVE_AVX512FP16) && defined(FA_MIXED_PRECISION_SOFTMAX) && !FA_MIXED_PRECISION_SOFTMAX
template <DType DT>
inline constexpr bool kHalfSoftmax = DT == DType::kF16;
#else
template <DType DT>
inline constexpr bool kHalfSoftmax = false;
#endif


// Oᵀ = 0 (unless the caller writes it whole itself) and every row's softmax
// state before its first key.
inline void init_tile_state(const AttentionJob& job, const Workspace& w, const TileItem& it, bool zero_output = true) {
  constexpr int W = Vec::W;
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, nvec = it.nvec;
  const std::int64_t h = it.h, split = it.split;
  for (int d = 0; zero_output && d < D; ++d) {
    for (int j = 0; j < nvec; ++j) Vec::store(w.ot + std::int64_t(d) * tq + j * W, Vec::zero());
  }
  for (int j = 0; j < nvec; ++j) {
    Vec::store(w.m + j * W, Vec::set1(initial_row_max(job, h, split)));
    Vec::store(w.l + j * W, Vec::set1(initial_row_sum(job, split)));
  }
  if (it.packed() && job.sinks) {  // each head's own sink
    for (int r = 0; r < it.rows; ++r) w.m[r] = initial_row_max(job, tile_row(it, r).head, split);
  }
}

// The online softmax of a tile of scores times `scale`: in fp32, or in fp16
// arithmetic where kHalfSoftmax says so.
template <DType DT>
inline void scaled_softmax_tile(const Workspace& w, int cols, int nvec, int tq, float scale) {
#if defined(FA_HAVE_AVX512FP16)
  if constexpr (kHalfSoftmax<DT>) {
    online_softmax_tile_half(w, cols, nvec, tq, scale);
    return;
  }
#endif
  online_softmax_tile(w, cols, nvec, tq, scale);
}

// Score modifiers and masks on a tile of raw scores (Q is not pre-scaled:
// one rounding per score instead of one per Q element and product term).
// Modifiers work in scaled log2 units, so with any of them the tile is
// scaled first, as it is when a packed tile's heads scale their scores
// differently (FP8 Q's per-head descale).  Returns the scale the softmax
// still has to apply.  A packed tile's heads are modified and masked one
// after the other (their rows are contiguous lanes).
inline float prepare_scores(const AttentionJob& job, const Workspace& w, const TileItem& it, std::int64_t j0, int cols) {
  const int tq = job.tile_q, heads = it.heads();
  float scale = score_scale(job, it.h);
  const bool per_head_scale = it.packed() && job.descale[0] && job.descale_stride[0] != 0;
  if (has_score_modifiers(job) || per_head_scale) {
    // Each lane's scale: the item's, or its own head's.
    alignas(64) float lane_scale[kMaxRowVectors * Vec::W];
    if (per_head_scale) {
      for (int r = 0; r < it.nvec * Vec::W; ++r) lane_scale[r] = r < it.rows ? score_scale(job, tile_row(it, r).head) : scale;
    }
    const typename Vec::T vscale = Vec::set1(scale);
    for (int c = 0; c < cols; ++c) {
      float* srow = w.st + std::int64_t(c) * tq;
      for (int j = 0; j < it.nvec; ++j) {
        const typename Vec::T f = per_head_scale ? Vec::load(lane_scale + j * Vec::W) : vscale;
        Vec::store(srow + j * Vec::W, Vec::mul(Vec::load(srow + j * Vec::W), f));
      }
    }
    if (has_score_modifiers(job)) {
      for (int g = 0; g < heads; ++g) {
        modify_scores(job, it.h + g, it.i0, it.head_rows, j0, cols, w.st + g * it.head_rows, tq, 1);
      }
    }
    scale = 1.0f;
  }
  for (int g = 0; g < heads; ++g) mask_tile(job, it.i0, it.head_rows, j0, cols, w.st + g * it.head_rows, tq);
  return scale;
}

// Modifiers, masks, the online softmax and dropout on a tile of raw scores
// (a packed tile's heads each with their own dropout stream).
template <DType DT>
inline void softmax_raw_tile(const AttentionJob& job, const Workspace& w, const TileItem& it, std::int64_t j0, int cols) {
  const float scale = prepare_scores(job, w, it, j0, cols);
  scaled_softmax_tile<DT>(w, cols, it.nvec, job.tile_q, scale);
  if (!job.dropout.active) return;
  for (int g = 0; g < it.heads(); ++g) {
    drop_tile(job, it.bh + g, it.i0, it.head_rows, j0, cols, w.st + g * it.head_rows, job.tile_q);
  }
}

}  // namespace fa::FA_KERNEL_NS
