// FlashAttention-3's schedule (Shah et al., 2024) in its CPU form: FA2's
// arithmetic, with compute and data movement overlapped.
//
// A work item is a pair of consecutive Q tiles of one (batch, head) and K/V
// chunk (A the earlier rows, B the later), run together over one stream of
// K/V tiles:
//   - ping-pong: B's Q·Kᵀ on tile j is issued while A's softmax and P·V on
//     the same tile are pending, and A's next Q·Kᵀ before B's softmax, so
//     each Q tile's dependent chain (scores -> softmax -> P·V) has the other
//     tile's independent work beside it;
//   - intra-tile pipelining: Q·Kᵀ of K/V tile j + 1 (for A) is issued
//     before the softmax of tile j (for B);
//   - K/V double buffering: tile j + 1 is converted into the second buffer
//     while tile j's V is still needed, once for both Q tiles (FA2 converts
//     it once per Q tile), and with the prefetch (FA_ENABLE_ASYNC or
//     async_prefetch) its lines are streamed into L2 from inside B's Q·Kᵀ and
//     A's P·V one step ahead.
// On amx the pair path (bf16, fp16 in two pieces, FP8) runs the same
// schedule over its own steps (PairTileSteps, kernels/bf16_pair_path.h):
// B's K·Qᵀ on the tile unit beside A's AVX-512 softmax and Vᵀ·Pᵀ, A's K·Qᵀ
// of tile j + 1 before B's softmax of tile j; the K/V operands are the
// call's shared packing where there is one (both tiles read the same slot
// while it is hot), else each tile's own.  The avx512bf16 engine runs its
// products on the softmax's own vector pipes (Engine::kOwnUnit false):
// there the schedule overlaps nothing and costs L1 (measured 0.93x), so
// each Q tile runs FA2's way.
// Per Q tile the operations and their order are FA2's, so FA3's results
// equal FA2's at the same tiles.  Short Q tiles (the row path), packed GQA
// groups and a pair's missing second tile run each Q tile FA2's way.
//
// Included by kernels/<isa>/kernels_<isa>.cpp (through
// kernels/version_mainloop.h) inside the path's namespace.
#pragma once

#include "../fa2/fa2_mainloop.h"

namespace fa::FA_KERNEL_NS {

// One Q tile's place in the pair's K/V stream: whether it attends the tile
// at j0, with how many keys, and its key spans there.
struct PairTile {
  const TileItem& it;
  const Workspace& w;
  KeySpan spans[kMaxRowVectors];
  const KeySpan* active_spans = nullptr;
  int cols = 0;

  PairTile(const TileItem& item, const Workspace& workspace) : it(item), w(workspace) {}
  bool attends(std::int64_t j0) const { return j0 >= it.kv_begin && j0 < it.kv_end; }
  void at(const AttentionJob& job, std::int64_t j0, int tkv) {
    cols = static_cast<int>(it.kv_end - j0 < tkv ? it.kv_end - j0 : tkv);
    active_spans = tile_key_spans(job, it, j0, cols, spans);
  }
};

template <DType DT, bool kPrefetch>
void run_tile_pair(const AttentionJob& job, const Workspace& wa, const Workspace& wb, const TileItem& ia,
                   const TileItem& ib) {
  StageLaps laps(job.stage_cycles);
  const int tkv = job.tile_kv;
  PairTile a(ia, wa), b(ib, wb);
  load_q_transposed<DT>(job, ia, wa.qt);
  load_q_transposed<DT>(job, ib, wb.qt);
  init_tile_state(job, wa, ia);
  init_tile_state(job, wb, ib);
  // The K/V buffers of the two workspaces are the double buffer.
  const Workspace* buffers[2] = {&wa, &wb};
  const std::int64_t begin = ia.kv_begin < ib.kv_begin ? ia.kv_begin : ib.kv_begin;
  const std::int64_t end = ia.kv_end > ib.kv_end ? ia.kv_end : ib.kv_end;
  const char *kbase = ia.kbase, *vbase = ia.vbase;
  auto load = [&](std::int64_t j0, int slot) {
    const int cols = static_cast<int>(end - j0 < tkv ? end - j0 : tkv);
    return load_kv_tile<DT, false, /*kContiguous=*/true>(job, *buffers[slot], kbase, vbase, ia.b, j0, cols, end, ia.kv_scales);
  };
  auto softmax_and_accumulate = [&](PairTile& t, std::int64_t j0, const KvTile& kv, KvLineStream* next) {
    softmax_raw_tile<DT>(job, t.w, t.it, j0, t.cols);
    laps.lap(kStageSoftmax);
    tile_accumulate(job, t.w, t.it.nvec, kv, t.cols, t.active_spans, next);
    laps.lap(kStagePv);
  };
  laps.lap(kStageQ);

  int cur = 0;
  KvTile kv[2];
  if (begin < end) {
    kv[cur] = load(begin, cur);
    laps.lap(kStageKv);
    if (a.attends(begin)) {
      a.at(job, begin, tkv);
      tile_scores(job, wa, ia.nvec, kv[cur], a.cols, a.active_spans, nullptr);
      laps.lap(kStageScores);
    }
  }
  for (std::int64_t j0 = begin; j0 < end; j0 += tkv) {
    const std::int64_t next_j = j0 + tkv;
    // The next tile's lines, streamed from inside B's Q·Kᵀ and A's P·V.
    KvLineStream next = kPrefetch ? next_kv_tile_lines(job, kbase, vbase, ia.b, j0, end) : KvLineStream{};
    // Ping: B's scores on tile j while A's softmax and P·V wait on A's.
    if (b.attends(j0)) {
      b.at(job, j0, tkv);
      tile_scores(job, wb, ib.nvec, kv[cur], b.cols, b.active_spans, kPrefetch ? &next : nullptr);
      laps.lap(kStageScores);
    }
    if (a.attends(j0)) softmax_and_accumulate(a, j0, kv[cur], kPrefetch ? &next : nullptr);
    next.issue(next.total_lines());  // what rounding left (none without the prefetch)
    // The next tile, into the other buffer: tile j's V stays for B.
    if (next_j < end) {
      kv[cur ^ 1] = load(next_j, cur ^ 1);
      laps.lap(kStageKv);
      // Pong, pipelined: A's scores on tile j + 1 before B's softmax of tile j.
      if (a.attends(next_j)) {
        a.at(job, next_j, tkv);
        tile_scores(job, wa, ia.nvec, kv[cur ^ 1], a.cols, a.active_spans, nullptr);
        laps.lap(kStageScores);
      }
    }
    if (b.attends(j0)) softmax_and_accumulate(b, j0, kv[cur], nullptr);
    cur ^= 1;
  }
  write_tile_outputs<DT>(job, wa, ia);
  write_tile_outputs<DT>(job, wb, ib);
  laps.finish(kStageEpilogue);
}

#if defined(FA_HAVE_BF16_PAIRS)
// The pair schedule of run_tile_pair on the pair path's steps (amx).  A
// streams the next K/V tile's lines into L2 for both.
template <DType DT>
void run_pair_engine_tiles(const AttentionJob& job, const Workspace& wa, const Workspace& wb, const TileItem& ia,
                           const TileItem& ib) {
  StageLaps laps(job.stage_cycles);
  PairTileSteps<DT, PairEngine> a(job, wa, ia), b(job, wb, ib, /*stream_next=*/false);
  a.start();
  b.start();
  PairEngine::begin();
  laps.lap(kStageQ);
  const std::int64_t begin = ia.kv_begin < ib.kv_begin ? ia.kv_begin : ib.kv_begin;
  const std::int64_t end = ia.kv_end > ib.kv_end ? ia.kv_end : ib.kv_end;
  if (a.attends(begin)) {
    a.load_k(begin);
    laps.lap(kStageKv);
    a.scores(laps);
  }
  for (std::int64_t j0 = begin; j0 < end; j0 += job.tile_kv) {
    if (b.attends(j0)) {  // ping: B's scores while A's softmax and P·V wait
      b.load_k(j0);
      laps.lap(kStageKv);
      b.scores(laps);
    }
    if (a.attends(j0)) a.softmax_accumulate(laps);
    if (a.attends(j0 + job.tile_kv)) {  // pong, pipelined: A's next scores before B's softmax
      a.load_k(j0 + job.tile_kv);
      laps.lap(kStageKv);
      a.scores(laps);
    }
    if (b.attends(j0)) b.softmax_accumulate(laps);
  }
  PairEngine::end();
  a.finish();
  b.finish();
  laps.finish(kStageEpilogue);
  if (a.needs_rerun()) rerun_screened<DT, PairEngine>(job, wa, ia);
  if (b.needs_rerun()) rerun_screened<DT, PairEngine>(job, wb, ib);
}
#endif

struct Fa3Loop {
  static constexpr Version kVersion = Version::kFA3;
  static constexpr bool kFp8 = true;
  static constexpr bool kAsync = true;
  static constexpr int kQTilesPerItem = 2;
  static std::size_t workspace_floats(const AttentionJob& job) {
    const std::size_t tiles = tile_kv_heads(job) > 2 ? std::size_t(tile_kv_heads(job)) : 2;
    const std::size_t pair = tiles * q_tile_workspace_floats(job), rows = row_path_workspace_floats(job);
    return pair > rows ? pair : rows;
  }
  static std::size_t kv_pack_bytes(const AttentionJob& job) { return shared_kv_pack_bytes(job); }
  // Q tiles per item: a pair, but one where the pair engine runs each tile
  // FA2's way (no unit of its own to overlap, kOwnUnit): a pair there only
  // halves the items the threads balance (measured 1% slower than FA2).
  // The planner's count follows the same rule (tile_planner.cpp).
  static int tiles_per_item([[maybe_unused]] const AttentionJob& job) {
#if defined(FA_HAVE_BF16_PAIRS)
    if (!PairEngine::kOwnUnit && engine_handles<PairEngine>(job.dtype) && pair_tile_path_fits(job)) return 1;
#endif
    return kQTilesPerItem;
  }
  static std::int64_t items(const AttentionJob& job) { return grouped_items(job, tiles_per_item(job)); }

  // Whether a Q tile runs FA2's way (see the header comment) rather than in
  // the interleaved pair.
  static bool alone(const AttentionJob& job, const TileItem& it) {
    return it.rows <= job.row_rows || job.pack_group > 1;
  }

  template <DType DT, bool kPrefetch>
  static void run_item(const AttentionJob& job, std::int64_t item, float* scratch) {
    const int per_item = tiles_per_item(job);
    const ItemCoords at = item_coords(job, item, per_item);
    if (tile_kv_heads(job) > 1) {  // packed tiles of several K/V heads: each Q tile of the pair FA2's way
      const std::int64_t first = at.q_group * per_item;
      for (std::int64_t t = first; t < first + per_item && t < job.q_tiles; ++t) {
        run_kv_head_tiles<DT, kPrefetch>(job, scratch, t, at.split, at.unit);
      }
      return;
    }
    const Workspace wa = carve_tile_workspace(job, scratch);
    const Workspace wb = carve_tile_workspace(job, scratch + q_tile_workspace_floats(job));
    const std::int64_t first = at.q_group * per_item;
    const TileItem ia = tile_item(job, first, at.split, at.unit);
    if (per_item == 1 || first + 1 >= job.q_tiles) {
      run_q_tile<DT, kPrefetch>(job, wa, ia);
      return;
    }
    const TileItem ib = tile_item(job, first + 1, at.split, at.unit);
    if (alone(job, ia) || alone(job, ib)) {
      run_q_tile<DT, kPrefetch>(job, wa, ia);
      run_q_tile<DT, kPrefetch>(job, wa, ib);
      return;
    }
#if defined(FA_HAVE_BF16_PAIRS)
    if constexpr (PairEngine::template kHandles<DT> && PairEngine::kOwnUnit) {
      if (pair_tile_path_fits(job)) {
        run_pair_engine_tiles<DT>(job, wa, wb, ia, ib);
        return;
      }
    }
#endif
    run_tile_pair<DT, kPrefetch>(job, wa, wb, ia, ib);
  }
};

}  // namespace fa::FA_KERNEL_NS
