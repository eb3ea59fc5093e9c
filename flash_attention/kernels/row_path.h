// The row path: Q tiles of at most kRowPathMaxRows rows (decoding, a
// sequence's last rows, GQA-packed groups) run row by row with keys in the
// vector lanes for the scores and head_dim in the lanes for P·V, so decoding
// does not idle 15 of 16 lanes.  Shared by FA2 and FA3.
#pragma once

#include <type_traits>

#include "kv_tiles.h"
#include "online_softmax.h"

namespace fa::FA_KERNEL_NS {

using detail::kRowPathMaxRows;


// K and V elements of the row path: fp32 rows, or 16-bit rows widened in
// registers (the avx2 and avx512 paths, which have F16C) — decoding reads
// each K/V element once, so a separate widening pass into a buffer would
// double its memory traffic.
template <DType DT>
using Elem = std::conditional_t<DT == DType::kF32, float, std::conditional_t<is_fp8(DT), std::uint8_t, std::uint16_t>>;

template <DType DT>
inline typename Vec::T load_elems(const Elem<DT>* p) {
  if constexpr (DT == DType::kF32) {
    return Vec::load(p);
  }
#if defined(FA_HAVE_SIMD_CONVERT)
  else if constexpr (DT == DType::kF16) {
    return Vec::load_f16(p);
  } else {
    return Vec::load_bf16(p);
  }
#endif
}

// dot(a, b) over n elements (n a multiple of 8).
template <DType DT>
inline float dot(const float* a, const Elem<DT>* b, int n) {
  typename Vec::T acc = Vec::zero();
  int d = 0;
  for (; d + Vec::W <= n; d += Vec::W) acc = Vec::fmadd(Vec::load(a + d), load_elems<DT>(b + d), acc);
  float sum = Vec::reduce_add(acc);
  for (; d < n; ++d) sum += a[d] * load_scalar<DT>(b, d);
  return sum;
}

// o[d] = o[d] * alpha + sum_c p[c] * v[c * ldv + d] for d < D, in register
// chunks of up to 8 vectors.
template <DType DT>
inline void accumulate_row(float* o, float alpha, const float* p, const Elem<DT>* v, std::int64_t ldv, int cols, int D) {
  constexpr int W = Vec::W, kChunk = 8 * Vec::W;
  int d0 = 0;
  for (; d0 + W <= D; d0 += kChunk) {
    const int nv = (D - d0) / W < 8 ? (D - d0) / W : 8;
    typename Vec::T acc[8];
    const typename Vec::T va = Vec::set1(alpha);
    for (int k = 0; k < nv; ++k) acc[k] = Vec::mul(Vec::load(o + d0 + k * W), va);
    for (int c = 0; c < cols; ++c) {
      if (p[c] == 0.0f) continue;
      const typename Vec::T pc = Vec::set1(p[c]);
      const Elem<DT>* vr = v + c * ldv + d0;
      for (int k = 0; k < nv; ++k) acc[k] = Vec::fmadd(pc, load_elems<DT>(vr + k * W), acc[k]);
    }
    for (int k = 0; k < nv; ++k) Vec::store(o + d0 + k * W, acc[k]);
    if (nv < 8) {
      d0 += nv * W;
      break;
    }
  }
  for (int d = d0; d < D; ++d) {  // the last D % W elements
    float acc = o[d] * alpha;
    for (int c = 0; c < cols; ++c) acc += p[c] * load_scalar<DT>(v + c * ldv, d);
    o[d] = acc;
  }
}

// The row path (see kRowPathMaxRows): per K/V tile and query row, scores
// by dot products over head_dim, the online softmax over keys in the lanes,
// and P·V with head_dim in the lanes.  Same masking, chunking and outputs as
// the tile path.  With GQA packing (job.pack_group = g > 1) the item holds
// the same query rows of the g query heads that share one K/V head: row
// rr is query i0 + rr % rows of head h + rr / rows, and every K/V tile is
// read once for all of them instead of once per head.
template <DType DT, bool kPrefetch>
void run_rows(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  const int rows = it.rows;
  const std::int64_t i0 = it.i0, kv_begin = it.kv_begin, kv_end = it.kv_end, b = it.b, h = it.h, split = it.split;
  const char *qbase = it.qbase, *kbase = it.kbase, *vbase = it.vbase;
  const int D = static_cast<int>(job.head_dim);
  const int tkv = job.tile_kv;
  const std::size_t es = dtype_size(DT);
  const int total_rows = rows * job.pack_group;
  auto head_of = [&](int rr) { return h + rr / rows; };
  auto query_of = [&](int rr) { return i0 + rr % rows; };
  float* q = w.qt;  // [total_rows][D]; each score is scaled once, after its dot product
  float* o = w.ot;  // [total_rows][D] unnormalized output
  for (int rr = 0; rr < total_rows; ++rr) {
    const char* qrow = qbase + ((head_of(rr) - h) * job.q_strides[1] + (rr % rows) * job.q_strides[2]) * es;
    for (int d = 0; d < D; ++d) q[rr * D + d] = load_scalar<DT>(qrow, d);
    for (int d = 0; d < D; ++d) o[rr * D + d] = 0.0f;
    w.m[rr] = initial_row_max(job, head_of(rr), split);
    w.l[rr] = initial_row_sum(job, split);
  }
  for (std::int64_t j0 = kv_begin; j0 < kv_end; j0 += tkv) {
    const int cols = static_cast<int>(kv_end - j0 < tkv ? kv_end - j0 : tkv);
#if defined(FA_HAVE_SIMD_CONVERT)
    // 16-bit K/V are read in place and widened in registers (see load_elems).
    constexpr bool kFused = DT == DType::kF16 || DT == DType::kBF16;
#else
    constexpr bool kFused = false;
#endif
    const KvTile kv = kFused ? KvTile{} : load_kv_tile<DT, kPrefetch>(job, w, kbase, vbase, j0, cols, kv_end);
    [[maybe_unused]] const std::uint16_t* k16 = reinterpret_cast<const std::uint16_t*>(kbase) + j0 * job.k_strides[2];
    [[maybe_unused]] const std::uint16_t* v16 = reinterpret_cast<const std::uint16_t*>(vbase) + j0 * job.v_strides[2];
    for (int rr = 0; rr < total_rows; ++rr) {
      const std::int64_t i = query_of(rr), head = head_of(rr);
      float* srow = w.st;  // [cols] scores, then probabilities
      const float* qr = q + rr * D;
      const float scale = score_scale(job, head);
#if defined(FA_HAVE_SIMD_CONVERT)
      if constexpr (kFused) {
        for (int c = 0; c < cols; ++c) srow[c] = dot<DT>(qr, k16 + c * job.k_strides[2], D) * scale;
      } else
#endif
      {
        for (int c = 0; c < cols; ++c) srow[c] = dot<DType::kF32>(qr, kv.k + c * kv.ldk, D) * scale;
      }
      if (has_score_modifiers(job)) modify_scores(job, head, i, 1, j0, cols, srow, 1, 0);
      if (job.window.active) mask_window(job, i, j0, cols, srow, 1);
      if (job.mask) {
        const std::int8_t* mrow = job.mask + i * job.seq_kv + j0;
        for (int c = 0; c < cols; ++c) {
          if (mrow[c] == 0) srow[c] = kNegInf;
        }
      }
      float block_max = kNegInf;
      for (int c = 0; c < cols; ++c) block_max = srow[c] > block_max ? srow[c] : block_max;
      const float m_old = w.m[rr];
      const float m_new = block_max > m_old ? block_max : m_old;
      const float m_sub = m_new == kNegInf ? 0.0f : m_new;  // as in online_softmax_tile
      float sum;
#if defined(FA_HAVE_AVX512FP16)
      if constexpr (kHalfSoftmax<DT>) sum = exp2_row_half(srow, cols, m_sub); else
#endif
      sum = exp2_row(srow, cols, m_sub);
      float alpha = m_old - m_sub;
      exp2_row(&alpha, 1, 0.0f);
      w.l[rr] = w.l[rr] * alpha + sum;
      w.m[rr] = m_new;
      if (job.dropout.active) {  // after the row sum took the undropped P
        const std::int64_t bh = b * job.heads + head;
        for (int c = 0; c < cols; ++c) srow[c] *= detail::dropout_factor(job.dropout, bh, i, j0 + c);
      }
#if defined(FA_HAVE_SIMD_CONVERT)
      if constexpr (kFused) {
        accumulate_row<DT>(o + rr * D, alpha, srow, v16, job.v_strides[2], cols, D);
      } else
#endif
      {
        accumulate_row<DType::kF32>(o + rr * D, alpha, srow, kv.v, kv.ldv, cols, D);
      }
    }
  }
  const std::int64_t BH = job.batch * job.heads;
  for (int rr = 0; rr < total_rows; ++rr) {
    const std::int64_t i = query_of(rr), head = head_of(rr), bh = b * job.heads + head;
    const float den = row_denominator(w.l[rr]) / output_scale(job, head);  // V's descale (FP8) or 1
    const float lse = row_lse(w.m[rr], w.l[rr]);
    if (job.num_splits > 1) {
      float* po = job.partial_o + ((split * BH + bh) * job.seq_q + i) * D;
      for (int d = 0; d < D; ++d) po[d] = o[rr * D + d] / den;
      job.partial_lse[(split * BH + bh) * job.seq_q + i] = lse;
      continue;
    }
    with_output_dtype<DT>(job, [&]<DType ODT>() {
      char* orow = static_cast<char*>(job.o) +
                   (b * job.o_strides[0] + head * job.o_strides[1] + i * job.o_strides[2]) * dtype_size(ODT);
      for (int d = 0; d < D; ++d) store_scalar<ODT>(orow, d, o[rr * D + d] / den);
    });
    if (job.lse) job.lse[b * job.lse_strides[0] + head * job.lse_strides[1] + i] = lse;
  }
}

}  // namespace fa::FA_KERNEL_NS
