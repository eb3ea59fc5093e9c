// The data every tile loop works on: the thread's scratch (Workspace), one
// work item's rows and keys (TileItem), and the keys a block of query rows
// may attend on a tile crossing its window (KeySpan).
//
// Like every header of kernels/ included by a version's mainloop, this one is
// compiled inside the path's namespace fa::FA_KERNEL_NS (the path's
// vec_<isa>.h first), so no inline symbol is shared between translation
// units built with different instruction-set flags.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernel_table.h"

namespace fa::FA_KERNEL_NS {

using detail::AttentionJob;

inline constexpr float kNegInf = -__builtin_inff();
inline constexpr float kLn2 = 0.69314718055994531f;

inline std::size_t pad16(std::size_t n) { return (n + 15) & ~std::size_t{15}; }

// Per-thread scratch, in floats.
struct Workspace {
  float* qt;     // [D][tile_q]      Qᵀ as given (the scale is applied to the scores)
  float* kbuf;   // [tile_kv][D]     K tile as fp32 (fp16/bf16 inputs)
  float* vbuf;   // [tile_kv][D]     V tile as fp32
  float* st;     // [tile_kv][tile_q] Sᵀ, then Pᵀ
  float* ot;     // [D][tile_q]      Oᵀ accumulator
  float* m;      // [tile_q] running row max (log2 units)
  float* l;      // [tile_q] running row sum
  float* alpha;  // [tile_q] rescale factor of the current tile

  static std::size_t floats(int tq, int tkv, int D) {
    return pad16(std::size_t(D) * tq) * 2 + pad16(std::size_t(tkv) * D) * 2 + pad16(std::size_t(tkv) * tq) +
           pad16(tq) * 3;
  }
  static Workspace carve(float* p, int tq, int tkv, int D) {
    Workspace w;
    w.qt = p;    p += pad16(std::size_t(D) * tq);
    w.kbuf = p;  p += pad16(std::size_t(tkv) * D);
    w.vbuf = p;  p += pad16(std::size_t(tkv) * D);
    w.st = p;    p += pad16(std::size_t(tkv) * tq);
    w.ot = p;    p += pad16(std::size_t(D) * tq);
    w.m = p;     p += pad16(tq);
    w.l = p;     p += pad16(tq);
    w.alpha = p;
    return w;
  }
};


// Keys [begin, end) of a K/V tile (relative to its first key) that one
// vector of query rows may attend (tile_key_spans).
struct KeySpan {
  int begin, end;
};
inline constexpr int kMaxRowVectors = 512 / Vec::W;  // tile_q <= 512


// Bytes of a K or V element (a quantized cache's differ from Q's).
inline std::int64_t kv_elem_bytes(const AttentionJob& job) {
  return job.kv_dtype == DType::kF32 ? 4 : job.kv_dtype == DType::kF16 || job.kv_dtype == DType::kBF16 ? 2 : 1;
}

// An int8 cache's per-key scales of K and V at one K/V head's first key
// (null otherwise): key row r's at [r * job.kv_scale_strides[.][2]].
struct KvScales {
  const float* k = nullptr;
  const float* v = nullptr;
  // Those of the K/V head `heads` further on (GQA packing's next head).
  KvScales next_heads(const AttentionJob& job, std::int64_t heads) const {
    if (!k) return *this;
    return {k + heads * job.kv_scale_strides[0][1], v + heads * job.kv_scale_strides[1][1]};
  }
};

// One (batch, head, Q tile) item on the tile path, whose keys and query rows
// the caller resolved.  A packed tile (AttentionJob::pack_tile) holds the
// same queries of several heads of one GQA group, head after head: row r is
// query i0 + r % head_rows of head h + r / head_rows (tile_row).
struct TileItem {
  std::int64_t b, h, bh, split, i0, kv_begin, kv_end;
  int rows, nvec;  // query rows, and the row vectors in use (rows rounded up to Vec::W)
  int head_rows;   // rows of each head (= rows but on a packed tile)
  const char *qbase, *kbase, *vbase;  // Q at the tile's first row; K and V at the head's first key
  KvScales kv_scales;                 // an int8 cache's, at the head's first key

  bool packed() const { return head_rows != rows; }
  int heads() const { return rows / head_rows; }
};

// Row r of a tile: its query head and query index.
struct TileRow {
  std::int64_t head, query;
};
inline TileRow tile_row(const TileItem& it, int r) { return {it.h + r / it.head_rows, it.i0 + r % it.head_rows}; }

// Element offset of a tile's row r from its first row's, its heads'
// rows `head_rows` apart in the tile and `head_stride` apart in memory.
inline std::int64_t tile_row_offset(int r, int head_rows, std::int64_t row_stride, std::int64_t head_stride) {
  return (r / head_rows) * head_stride + (r % head_rows) * row_stride;
}

// head_dim rounded up to a multiple of `step` (an engine's padding).
inline int round_up_dims(std::int64_t head_dim, int step) {
  return static_cast<int>((head_dim + step - 1) / step * step);
}

}  // namespace fa::FA_KERNEL_NS
