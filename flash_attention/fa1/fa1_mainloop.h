// FlashAttention-1's loop order (Dao et al., 2022, Algorithm 1), as the
// baseline it was: for each K/V tile j (outer), for each Q tile i (inner):
// read Q_i, O_i, m_i and l_i from memory, compute S_ij and its online
// softmax, and write back
//   O_i = diag(l_i_new)^-1 (diag(l_i) e^(m_i - m_i_new) O_i + P_ij V_j)
// so O stays normalized after every step (FA2 divides once, at the end).
// The work is parallel over (batch, head) only, one item each, with the
// fixed 64 x 64 tiles of the FA1 kernel.  Output and softmax state of every
// Q tile of the (batch, head) live in the thread's workspace, in fp32, and
// are read, rescaled and written back at every K/V step; Q_i is read from the
// caller's tensor again at every step.
//
// The engines are FA2's (kernels/engines.h): the same masks, score
// modifiers, online softmax, dropout, microkernel and epilogue; only the
// loop order, the in-memory state and the per-step normalization are FA1's.
// FA1 has no row path, no GQA packing, no split-KV, no sinks, no varlen and
// no prefetch (version_supports refuses what it lacks), and runs the vector
// loop on every path (the bf16 pair engines came later).
//
// Included by kernels/<isa>/kernels_<isa>.cpp (through
// kernels/version_mainloop.h) inside the path's namespace.
#pragma once

#include "../kernels/engines.h"

namespace fa::FA_KERNEL_NS {

// A thread's scratch: the workspace of one Q tile (Qᵀ, K, V, Sᵀ; its Oᵀ and
// rows unused), then the (batch, head)'s state "in memory": Oᵀ of every Q
// tile [q_tiles][D][tile_q], its m and l [q_tiles][tile_q], and one row of
// the previous l.
struct Fa1State {
  float* o;
  float* m;
  float* l;
  float* l_before;
  std::size_t o_stride, row_stride;  // floats between Q tiles' blocks

  static std::size_t o_floats(const AttentionJob& job) { return pad16(std::size_t(job.head_dim) * job.tile_q); }
  static std::size_t floats(const AttentionJob& job) {
    return std::size_t(job.q_tiles) * (o_floats(job) + 2 * pad16(job.tile_q)) + pad16(job.tile_q);
  }
  static Fa1State carve(float* p, const AttentionJob& job) {
    Fa1State s;
    s.o_stride = o_floats(job);
    s.row_stride = pad16(job.tile_q);
    s.o = p;
    s.m = s.o + job.q_tiles * s.o_stride;
    s.l = s.m + job.q_tiles * s.row_stride;
    s.l_before = s.l + job.q_tiles * s.row_stride;
    return s;
  }
  // Q tile `qt`'s view: the shared buffers of `w`, its own Oᵀ, m and l.
  Workspace tile(const Workspace& w, std::int64_t qt) const {
    Workspace v = w;
    v.ot = o + qt * o_stride;
    v.m = m + qt * row_stride;
    v.l = l + qt * row_stride;
    return v;
  }
};

// After the online softmax of a step: FA1's normalized update.  With l the
// new row sum, l_before the old one and alpha = e^(m_old - m_new), the
// output's scale becomes l_before alpha / l (into alpha, where P·V's fused
// rescale reads it) and P's column r is divided by l[r].  l is 0 for a row
// without an attendable key yet (its l_before and P are 0 too) and at least
// 1 otherwise (the max's own term), so dividing by max(l, FLT_MIN) gives
// the factor where it matters and 0 * finite = 0 where the row is empty.
inline void normalize_step(const Workspace& w, const float* l_before, int cols, int nvec, int tq) {
  using T = typename Vec::T;
  constexpr int W = Vec::W;
  for (int j = 0; j < nvec; ++j) {
    const T inv = Vec::div(Vec::set1(1.0f), Vec::max(Vec::load(w.l + j * W), Vec::set1(__FLT_MIN__)));
    Vec::store(w.alpha + j * W, Vec::mul(Vec::mul(Vec::load(l_before + j * W), Vec::load(w.alpha + j * W)), inv));
    for (int c = 0; c < cols; ++c) {
      float* p = w.st + std::int64_t(c) * tq + j * W;
      Vec::store(p, Vec::mul(Vec::load(p), inv));
    }
  }
}

template <DType DT>
void run_fa1_head(const AttentionJob& job, std::int64_t unit, float* scratch) {
  StageLaps laps(job.stage_cycles);
  const int tq = job.tile_q, tkv = job.tile_kv, D = static_cast<int>(job.head_dim);
  const Workspace w = Workspace::carve(scratch, tq, tkv, D);
  const Fa1State state = Fa1State::carve(scratch + Workspace::floats(tq, tkv, D), job);
  const std::int64_t q_tiles = job.q_tiles;
  for (std::int64_t qt = 0; qt < q_tiles; ++qt) init_tile_state(job, state.tile(w, qt), tile_item(job, qt, 0, unit));
  // The keys any row attends: windows move forward with the row.
  const TileItem first = tile_item(job, 0, 0, unit), last = tile_item(job, q_tiles - 1, 0, unit);
  const std::int64_t kv_begin = first.kv_begin, kv_end = last.kv_end > first.kv_end ? last.kv_end : first.kv_end;
  laps.lap(kStageQ);

  KeySpan span_buffer[kMaxRowVectors];
  for (std::int64_t j0 = kv_begin; j0 < kv_end; j0 += tkv) {
    const int cols = static_cast<int>(kv_end - j0 < tkv ? kv_end - j0 : tkv);
    const KvTile kv = load_kv_tile<DT, false, /*kContiguous=*/true>(job, w, first.kbase, first.vbase, first.b, j0, cols, kv_end, first.kv_scales);
    laps.lap(kStageKv);
    for (std::int64_t qt = 0; qt < q_tiles; ++qt) {
      const TileItem it = tile_item(job, qt, 0, unit);
      if (j0 < it.kv_begin || j0 >= it.kv_end) continue;  // no row of this Q tile attends these keys
      const int tile_cols = static_cast<int>(it.kv_end - j0 < cols ? it.kv_end - j0 : cols);
      const Workspace wq = state.tile(w, qt);
      load_q_transposed<DT>(job, it, wq.qt);
      laps.lap(kStageQ);
      const KeySpan* spans = tile_key_spans(job, it, j0, tile_cols, span_buffer);
      tile_scores(job, wq, it.nvec, kv, tile_cols, spans, nullptr);
      laps.lap(kStageScores);
      for (int r = 0; r < it.nvec * Vec::W; ++r) state.l_before[r] = wq.l[r];
      softmax_raw_tile<DT>(job, wq, it, j0, tile_cols);
      laps.lap(kStageSoftmax);
      normalize_step(wq, state.l_before, tile_cols, it.nvec, tq);
      laps.lap(kStageRescale);
      tile_accumulate(job, wq, it.nvec, kv, tile_cols, spans, nullptr);
      laps.lap(kStagePv);
    }
  }
  for (std::int64_t qt = 0; qt < q_tiles; ++qt) {
    write_tile_outputs<DT>(job, state.tile(w, qt), tile_item(job, qt, 0, unit), /*normalized=*/true);
  }
  laps.finish(kStageEpilogue);
}

struct Fa1Loop {
  static constexpr Version kVersion = Version::kFA1;
  static constexpr bool kFp8 = false;
  static constexpr bool kAsync = false;
  static std::size_t workspace_floats(const AttentionJob& job) {
    return Workspace::floats(job.tile_q, job.tile_kv, static_cast<int>(job.head_dim)) + Fa1State::floats(job);
  }
  static std::size_t kv_pack_bytes(const AttentionJob&) { return 0; }
  static std::int64_t items(const AttentionJob& job) { return job_units(job); }
  template <DType DT, bool>
  static void run_item(const AttentionJob& job, std::int64_t item, float* scratch) {
    run_fa1_head<DT>(job, item, scratch);
  }
};

}  // namespace fa::FA_KERNEL_NS
