// Which keys a query row may attend on a tile: the key window (causal,
// sparse modes), edge masking of window-crossing tiles, the explicit mask,
// and the per-row-vector key spans both products use to skip keys.
#pragma once

#include "tile_state.h"

namespace fa::FA_KERNEL_NS {


inline std::int64_t key_begin(const AttentionJob& job, std::int64_t i) { return detail::window_begin(job.window, i, job.seq_kv); }
inline std::int64_t key_end(const AttentionJob& job, std::int64_t i) { return detail::window_end(job.window, i, job.seq_kv); }

// Keys outside row i's window become -inf in the scores (Sᵀ[c][r] with
// stride `stride` between keys), for the keys [j0, j0 + cols) of a tile.
inline void mask_window(const AttentionJob& job, std::int64_t i, std::int64_t j0, int cols, float* s, std::int64_t stride) {
  const std::int64_t begin = key_begin(job, i) - j0, end = key_end(job, i) - j0;
  for (int c = 0; c < cols && c < begin; ++c) s[c * stride] = kNegInf;
  for (int c = end < 0 ? 0 : static_cast<int>(end); c < cols; ++c) s[c * stride] = kNegInf;
}


// Whether the keys [j0, j0 + cols) cross the window of some row in [i0, i0 +
// rows): the causal diagonal, a band's sides.  Windows move forward with the
// row, so the first row's end and the last row's begin decide.
inline bool tile_crosses_window(const AttentionJob& job, std::int64_t i0, int rows, std::int64_t j0, int cols) {
  return job.window.active && (j0 + cols > key_end(job, i0) || j0 < key_begin(job, i0 + rows - 1));
}

// Masking: only tiles crossing a window edge, or any tile under an explicit
// mask, pay for it.
inline void mask_tile(const AttentionJob& job, std::int64_t i0, int rows, std::int64_t j0, int cols, float* st, int tq) {
  if (tile_crosses_window(job, i0, rows, j0, cols)) {
    // Key j may be attended by queries i in [j - offset - right, j - offset +
    // left] (the window of mask.h read the other way; exact for keys inside
    // the sequence), so each key's row of Sᵀ is masked in at most two
    // contiguous runs of query lanes: plain fills instead of strided stores.
    const detail::KeyWindow& kw = job.window;
    const bool left_bounded = kw.left < kUnboundedTokens, right_bounded = kw.right < kUnboundedTokens;
    for (int c = 0; c < cols; ++c) {
      const std::int64_t j = j0 + c;
      std::int64_t first = right_bounded ? j - kw.offset - kw.right - i0 : 0;
      std::int64_t last = left_bounded ? j - kw.offset + kw.left - i0 : rows - 1;
      first = first < 0 ? 0 : (first > rows ? rows : first);
      last = last < first - 1 ? first - 1 : (last > rows - 1 ? rows - 1 : last);
      float* srow = st + std::int64_t(c) * tq;
      for (std::int64_t r = 0; r < first; ++r) srow[r] = kNegInf;
      for (std::int64_t r = last + 1; r < rows; ++r) srow[r] = kNegInf;
    }
  }
  if (job.mask) {
    for (int r = 0; r < rows; ++r) {
      const std::int8_t* mrow = job.mask + (i0 + r) * job.seq_kv + j0;
      for (int c = 0; c < cols; ++c) {
        if (mrow[c] == 0) st[std::int64_t(c) * tq + r] = kNegInf;
      }
    }
  }
}

// For a tile that crosses its rows' window (a causal diagonal tile, a
// band's edges): each vector of W query rows' span of keys, into `spans`
// (it.nvec entries); null for a tile every row may attend whole.  Windows
// move with the row (begin and end never decrease), so a vector's span runs
// from its first row's begin to its last row's end.  Explicit masks only
// remove more keys, which masking handles as before.
// A packed tile's vectors hold several heads' rows, whose windows restart
// with each head: every vector takes the span of all the tile's queries
// (a union, so it keeps the order the products rely on).
inline const KeySpan* tile_key_spans(const AttentionJob& job, const TileItem& it, std::int64_t j0, int cols, KeySpan* spans) {
  constexpr int W = Vec::W;
  if (!tile_crosses_window(job, it.i0, it.head_rows, j0, cols)) return nullptr;
  for (int j = 0; j < it.nvec; ++j) {
    std::int64_t first = it.i0 + W * j, last = it.i0 + (W * j + W - 1 < it.rows ? W * j + W - 1 : it.rows - 1);
    if (it.packed()) first = it.i0, last = it.i0 + it.head_rows - 1;
    std::int64_t begin = key_begin(job, first) - j0, end = key_end(job, last) - j0;
    begin = begin < 0 ? 0 : (begin > cols ? cols : begin);
    end = end < begin ? begin : (end > cols ? cols : end);
    spans[j] = {static_cast<int>(begin), static_cast<int>(end)};
  }
  return spans;
}

}  // namespace fa::FA_KERNEL_NS
