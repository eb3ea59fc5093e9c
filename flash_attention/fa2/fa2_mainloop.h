// FlashAttention-2's loop order (Dao, 2023): the Q tile outer, the K/V
// tiles inner, so each item's output and softmax state stay in the thread's
// scratch (registers and L1/L2) from its first key to its last, the output
// is divided by the row sum once, at the end, and the work is parallel over
// (batch, head, Q tile) and, with split-KV, K/V chunks.
//
// Work item = (batch, head, Q tile).  The Q tile is kept transposed (Qᵀ,
// [head_dim][tile_q]) so every step vectorizes over query rows:
//   Sᵀ = K · Qᵀ                  [keys][rows]   (microkernel, K in a contiguous tile buffer)
//   row max / exp2 / row sum     vertical over keys: one lane per query row,
//                                no horizontal reductions anywhere
//   Oᵀ = Oᵀ · diag(alpha) + Vᵀ · Pᵀ  [head_dim][rows] (same microkernel)
// and the epilogue transposes Oᵀ back, divides by the row sum and converts.
// Short Q tiles take the row path; bf16 (and fp16 on amx) take the pair
// path where it fits (kernels/bf16_pair_path.h).
//
// Included by kernels/<isa>/kernels_<isa>.cpp (through
// kernels/version_mainloop.h) inside the path's namespace.
#pragma once

#include "../kernels/engines.h"

namespace fa::FA_KERNEL_NS {

template <DType DT, bool kPrefetch>
void run_tile(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  StageLaps laps(job.stage_cycles);
  const int tkv = job.tile_kv;
  const std::int64_t kv_end = it.kv_end;
  load_q_transposed<DT>(job, it, w.qt);
  init_tile_state(job, w, it);
  laps.lap(kStageQ);

  KeySpan span_buffer[kMaxRowVectors];
  for (std::int64_t j0 = it.kv_begin; j0 < kv_end; j0 += tkv) {
    const int cols = static_cast<int>(kv_end - j0 < tkv ? kv_end - j0 : tkv);
    const KeySpan* spans = tile_key_spans(job, it, j0, cols, span_buffer);
    // FA_ENABLE_ASYNC: the next tile's lines, streamed from inside the products.
    KvLineStream next = kPrefetch ? next_kv_tile_lines(job, it.kbase, it.vbase, it.b, j0, kv_end) : KvLineStream{};
    const KvTile kv = load_kv_tile<DT, false, /*kContiguous=*/true>(job, w, it.kbase, it.vbase, it.b, j0, cols, kv_end, it.kv_scales);
    laps.lap(kStageKv);
    tile_scores(job, w, it.nvec, kv, cols, spans, kPrefetch ? &next : nullptr);
    laps.lap(kStageScores);
    softmax_raw_tile<DT>(job, w, it, j0, cols);
    laps.lap(kStageSoftmax);
    tile_accumulate(job, w, it.nvec, kv, cols, spans, kPrefetch ? &next : nullptr);
    next.issue(next.total_lines());  // what rounding left (none without FA_ENABLE_ASYNC)
    laps.lap(kStagePv);
  }

  write_tile_outputs<DT>(job, w, it);
  laps.finish(kStageEpilogue);
}

// One Q tile of an FA2 or FA3 item on the path its shape takes: the row path
// for short tiles and GQA groups packed for it, the pair path where its
// engine runs the dtype and the shape fits, else the vector tile loop
// `run_tile` (a tile packed with a GQA group's heads takes either of these).
template <DType DT, bool kPrefetch>
void run_q_tile(const AttentionJob& job, const Workspace& w, const TileItem& it) {
  if (!job.pack_tile && (it.rows <= job.row_rows || job.pack_group > 1)) {
    run_rows<DT, kPrefetch>(job, w, it);
    return;
  }
#if defined(FA_HAVE_BF16_PAIRS)
  if constexpr (PairEngine::template kHandles<DT>) {
    if (pair_path_runs<PairEngine>(job)) {
      run_tile_pairs<DT, PairEngine>(job, w, it);
      return;
    }
  }
#endif
  run_tile<DT, kPrefetch>(job, w, it);
}

// The head_dim a Q tile's workspace is carved for: the pair path's padded
// one (pair_dims) on the paths that have it, so either loop fits.
inline int tile_workspace_dims(const AttentionJob& job) {
#if defined(FA_HAVE_BF16_PAIRS)
  return pair_dims(job.head_dim);
#else
  return static_cast<int>(job.head_dim);
#endif
}
inline Workspace carve_tile_workspace(const AttentionJob& job, float* scratch) {
  return Workspace::carve(scratch, job.tile_q, job.tile_kv, tile_workspace_dims(job));
}

// The workspace of one Q tile: the vector loop's, or the pair path's (which
// adds P in bf16 pairs) on the paths that have one.
inline std::size_t q_tile_workspace_floats(const AttentionJob& job) {
  const int tq = job.tile_q, tkv = job.tile_kv, D = tile_workspace_dims(job);
#if defined(FA_HAVE_BF16_PAIRS)
  return pair_workspace_floats(tq, tkv, D, job.dtype);
#else
  return Workspace::floats(tq, tkv, D);
#endif
}

// K/V packed once per call for the pair path (0 elsewhere).
inline std::size_t shared_kv_pack_bytes([[maybe_unused]] const AttentionJob& job) {
#if defined(FA_HAVE_BF16_PAIRS)
  return pair_kv_pack_bytes<PairEngine>(job);
#else
  return 0;
#endif
}

// A packed tile item of several K/V heads (tile_kv_heads): a tile of each,
// over the key tiles together on the pair path (run_tiles_together); else
// one after the other.  Each keeps its Q, O and row state in a workspace of
// its own (`scratch` holds them in turn); what a tile step uses and leaves
// (the K/V buffers, the scores, the rescale factors and P after them) is
// the first one's for all, so the heads' steps share those lines in L1.
template <DType DT, bool kPrefetch>
void run_kv_head_tiles(const AttentionJob& job, float* scratch, std::int64_t q_tile, std::int64_t split,
                       std::int64_t unit) {
  const int n = tile_kv_heads(job);
  Workspace w[detail::kMaxTileKvHeads];
  TileItem it[detail::kMaxTileKvHeads];
  for (int g = 0; g < n; ++g) {
    w[g] = carve_tile_workspace(job, scratch + std::size_t(g) * q_tile_workspace_floats(job));
    if (g > 0) {
      w[g].kbuf = w[0].kbuf;
      w[g].vbuf = w[0].vbuf;
      w[g].st = w[0].st;
      w[g].alpha = w[0].alpha;
    }
    it[g] = kv_head_tile(job, q_tile, split, unit, g);
  }
#if defined(FA_HAVE_BF16_PAIRS)
  if constexpr (PairEngine::template kHandles<DT>) {
    if (pair_path_runs<PairEngine>(job)) {
      run_tiles_together<DT, PairEngine>(job, w, it, n);
      return;
    }
  }
#endif
  for (int g = 0; g < n; ++g) run_q_tile<DT, kPrefetch>(job, w[g], it[g]);
}

struct Fa2Loop {
  static constexpr Version kVersion = Version::kFA2;
  static constexpr bool kFp8 = false;
  static constexpr bool kAsync = true;
  static std::size_t workspace_floats(const AttentionJob& job) {
    const std::size_t tile = q_tile_workspace_floats(job) * tile_kv_heads(job), rows = row_path_workspace_floats(job);
    return tile > rows ? tile : rows;
  }
  static std::size_t kv_pack_bytes(const AttentionJob& job) { return shared_kv_pack_bytes(job); }
  static std::int64_t items(const AttentionJob& job) { return grouped_items(job, 1); }
  template <DType DT, bool kPrefetch>
  static void run_item(const AttentionJob& job, std::int64_t item, float* scratch) {
    const ItemCoords at = item_coords(job, item, 1);
    if (tile_kv_heads(job) > 1) return run_kv_head_tiles<DT, kPrefetch>(job, scratch, at.q_group, at.split, at.unit);
    const Workspace w = carve_tile_workspace(job, scratch);
    run_q_tile<DT, kPrefetch>(job, w, tile_item(job, at.q_group, at.split, at.unit));
  }
};

}  // namespace fa::FA_KERNEL_NS
