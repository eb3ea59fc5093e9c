// The tile path's epilogue: O normalized by the row sums and written in the
// caller's dtype and layout, the log-sum-exp, or a chunk's fp32 partials for
// the split-KV combine.
#pragma once

#include "kv_tiles.h"
#include "online_softmax.h"

namespace fa::FA_KERNEL_NS {

// The log-sum-exp of a tile's rows (natural log), when asked for.
inline void write_tile_lse(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  if (!job.lse) return;
  for (int r = 0; r < it.rows; ++r) {
    const TileRow at = tile_row(it, r);
    job.lse[it.b * job.lse_strides[0] + at.head * job.lse_strides[1] + at.query] = row_lse(w.m[r], w.l[r]);
  }
}

// Element offset of a tile's row r in O, from its batch's first row.
inline std::int64_t o_row_offset(const AttentionJob& job, const TileItem& it, int r) {
  const TileRow at = tile_row(it, r);
  return it.b * job.o_strides[0] + at.head * job.o_strides[1] + at.query * job.o_strides[2];
}

// A tile's row r in a split-KV call's partials: the row of
// partial_o ([split][batch * heads + head][query], head_dim floats each) and
// the element of partial_lse.
inline std::int64_t partial_row(const AttentionJob& job, const TileItem& it, int r) {
  const TileRow at = tile_row(it, r);
  return ((it.split * job.batch + it.b) * job.heads + at.head) * job.seq_q + at.query;
}

// O rows [0, rows) of a tile in the output dtype ODT: Oᵀ divided by the
// denominators in w.alpha, transposed in 16 x 16 blocks.
template <DType ODT>
inline void store_o_rows(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, rows = it.rows;
  char* obase = static_cast<char*>(job.o);
  for (int r0 = 0; r0 < rows; r0 += 16) {
    const int r1 = r0 + 16 < rows ? r0 + 16 : rows;
    for (int d0 = 0; d0 < D; d0 += 16) {
      const int d1 = d0 + 16 < D ? d0 + 16 : D;
      for (int r = r0; r < r1; ++r) {
        const std::int64_t row = o_row_offset(job, it, r);
        for (int d = d0; d < d1; ++d) store_scalar<ODT>(obase, row + d, w.ot[std::int64_t(d) * tq + r] / w.alpha[r]);
      }
    }
  }
}

// The tile path's epilogue: normalize once (a row that attended nothing
// outputs zeros) and write O and the LSE, or a chunk's fp32 partials.
// `normalized`: Oᵀ is already divided by the row sums (FA1 keeps it so).
// FP8 inputs: times V's descale factor, in the output dtype the call asked for.
template <DType DT>
inline void write_tile_outputs(const AttentionJob& job, const Workspace& w, const TileItem& it, bool normalized = false) {
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, rows = it.rows;
  // What each row is divided by (alpha is free now): its sum over V's
  // descale factor (1 but for FP8, which leaves the sum exact; the heads of
  // a packed tile share their K/V head's).
  const float out_scale = output_scale(job, it.h);
  for (int r = 0; r < rows; ++r) w.alpha[r] = (normalized ? 1.0f : row_denominator(w.l[r])) / out_scale;
  if (job.num_splits > 1) {  // a chunk's normalized fp32 partial, combined later
    for (int r0 = 0; r0 < rows; r0 += 16) {
      const int r1 = r0 + 16 < rows ? r0 + 16 : rows;
      for (int d0 = 0; d0 < D; d0 += 16) {
        const int d1 = d0 + 16 < D ? d0 + 16 : D;
        for (int r = r0; r < r1; ++r) {
          float* po = job.partial_o + partial_row(job, it, r) * D;
          for (int d = d0; d < d1; ++d) po[d] = w.ot[std::int64_t(d) * tq + r] / w.alpha[r];
        }
      }
    }
    for (int r = 0; r < rows; ++r) job.partial_lse[partial_row(job, it, r)] = row_lse(w.m[r], w.l[r]);
    return;
  }
  with_output_dtype<DT>(job, [&]<DType ODT>() { store_o_rows<ODT>(job, w, it); });
  write_tile_lse(job, w, it);
}

}  // namespace fa::FA_KERNEL_NS
