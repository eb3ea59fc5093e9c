// Times the stages of the FA2 tile loop of one instruction-set path on one
// thread, each on its own in a loop over the same tile (Q·Kᵀ, softmax, P·V,
// K/V conversion; on the pair path (amx, avx512bf16) also the packing into
// the pair layouts; the softmax's cost does not depend on the values it sees),
// then a whole work item (run_q_tile) against the sum of its tiles.  The
// code timed is the kernel's own (fa2/fa2_mainloop.h and the engines it
// includes), compiled once with it: kernels/version_mainloop.h includes this
// in each path's FA2 translation unit and its KernelTable points at
// time_stages, which bench/fa2_stages reaches through
// fa::testing::time_tile_stages (a program of its own compiling the loop
// again per path cost the suite's build minutes).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "flash_attention/testing.h"

namespace fa::FA_KERNEL_NS {

template <class Fn>
double ns_per_call(Fn&& fn, double seconds) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) fn();
  long calls = 0;
  const auto start = clock::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 16; ++i) fn();
    calls += 16;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed * 1e9 / double(calls);
}

#if defined(FA_HAVE_BF16_PAIRS)
// The pair path's stages (bf16_pair_path.h and the path's engine), on the
// same buffers.
template <DType DT, class Add>
void time_pair_stages(const testing::StageConfig& cfg, const Workspace& w, const char* q, const char* k, const char* v,
                     Add&& add) {
  constexpr int kP = kPieces<DT>;
  const int D = cfg.head_dim, tq = cfg.tile_q, tkv = cfg.tile_kv, nvec = tq / 16;
  const double flops = 2.0 * tq * tkv * D;
  const TileOperands op = tile_operands(w, tq, tkv, D);
  std::uint32_t *qb = op.qb, *vt = op.vt, *pb = op.pb;
  std::uint16_t* kp = op.kp;
  const std::int64_t q_lo = op.q_lo, k_lo = op.k_lo, v_lo = op.v_lo, p_lo = op.p_lo;
  const auto* k16 = reinterpret_cast<const std::uint16_t*>(k);
  const auto* v16 = reinterpret_cast<const std::uint16_t*>(v);
  pack_q_pairs<DT>(reinterpret_cast<const std::uint16_t*>(q), D, 0, tq, tq, tq, D, D, qb, q_lo);
  PairEngine::begin();
  auto kpack = [&] { pack_k_tiles<DT>(k16, D, tkv, tkv, D, D, kp, k_lo); };
  auto scores = [&] { PairEngine::scores<kP>(kp, k_lo, qb, q_lo, tq, D, D, tkv, tq, w.st, nullptr, nullptr); };
  auto vpack = [&] { pack_v_transposed<DT>(v16, D, tkv, tkv, D, D, vt, tkv / 2, v_lo); };
  auto fused = [&] { softmax_to_pairs<kP, kHalfSoftmax<DT>>(w, tkv, tkv, nvec, tq, 0.18f, pb, tkv / 2, p_lo); };
  auto rescale = [&] { rescale_output(w, D, nvec, tq); };
  auto accumulate = [&] {
    PairEngine::accumulate<kP>(vt, tkv / 2, v_lo, pb, tkv / 2, p_lo, tq, D, tkv, tq, w.ot, false, nullptr, nullptr);
  };
  kpack();
  scores();  // Sᵀ holds real scores before the softmax is timed
  vpack();
  // The report keeps the names' addresses (one timing at a time).
  static char qk_name[40], pv_name[40];
  std::snprintf(qk_name, sizeof qk_name, "Q*K^T (%s%s)", PairEngine::kUnit, kP == 1 ? "" : ", 3 products");
  std::snprintf(pv_name, sizeof pv_name, "P*V (%s%s)", PairEngine::kUnit, kP == 1 ? "" : ", 3 products");
  add(qk_name, ns_per_call(scores, cfg.seconds), flops);
  add(kP == 1 ? "K copy to A-tile order" : "K split+copy to A tiles", ns_per_call(kpack, cfg.seconds), 0);
  add(kP == 1 ? "V transpose to pairs" : "V split+transpose", ns_per_call(vpack, cfg.seconds), 0);
  add(kHalfSoftmax<DT> ? "fp16-exp softmax + P split" : kP == 1 ? "softmax + P to bf16 pairs" : "softmax + P split to pairs",
      ns_per_call(fused, cfg.seconds), 0);
  for (int i = 0; i < tq; ++i) w.alpha[i] = 0.5f;  // rescale timed as when the max moved
  add("O rescale (when max moved)", ns_per_call(rescale, cfg.seconds), 0);
  add(pv_name, ns_per_call(accumulate, cfg.seconds), flops);
#if defined(FA_HAVE_AMX)
  // The same number of 2 x 2 blocks as Q*K^T on one 32 x 32 block of the
  // operands (in L1 throughout): what the blocking itself allows.
  auto ceiling = [&] {
    const std::int64_t sts = std::int64_t(tq) * 4;
    for (int block = 0; block < (tq / 32) * (tkv / 32); ++block) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int d0 = 0; d0 < D; d0 += 32) {
        block_2x2<kP>(kp + (d0 / 32) * 512, kp + (D / 32 + d0 / 32) * 512, k_lo * 2, 64, qb + (d0 / 2) * 16,
                      qb + (D / 2 + d0 / 2) * 16, q_lo * 4, 64);
      }
      _tile_stored(0, w.st, sts);
      _tile_stored(1, w.st + 16, sts);
      _tile_stored(2, w.st + 16 * tq, sts);
      _tile_stored(3, w.st + 16 * tq + 16, sts);
    }
  };
  if (tq >= 32) add("Q*K^T block, operands in L1", ns_per_call(ceiling, cfg.seconds), flops, true);
#endif
  PairEngine::end();
}
#endif

// The scratch and the tensors in one block from std::aligned_alloc, not
// std::vector: a kernel object must hold no code that can throw (its
// unwinding tables and the standard library's weak copies compiled with the
// path's flags; isa_objects_share_no_symbols checks).  False when the
// block cannot be had.
template <DType DT>
bool time_stages_typed(const testing::StageConfig& cfg, testing::StageReport* out) {
  const int D = cfg.head_dim, tq = cfg.tile_q, tkv = cfg.tile_kv, nvec = tq / Vec::W;
#if defined(FA_HAVE_BF16_PAIRS)
  const std::size_t scratch_floats = pair_workspace_floats(tq, tkv, D, DT);
#else
  const std::size_t scratch_floats = Workspace::floats(tq, tkv, D);
#endif
  auto lines = [](std::size_t bytes) { return (bytes + 63) & ~std::size_t{63}; };
  const std::int64_t seq_kv = std::int64_t(tkv) * cfg.tiles_per_item;
  const std::size_t es = dtype_size(DT);
  const std::size_t scratch_bytes = lines(scratch_floats * sizeof(float)), kv_bytes = lines(seq_kv * D * es),
                    q_bytes = lines(std::size_t(tq) * D * es);
  // 64-byte aligned, as the library's scratch: a tile row that straddles two
  // cache lines costs the tile loads and stores about 2.5x.
  char* const block = static_cast<char*>(std::aligned_alloc(64, scratch_bytes + 2 * kv_bytes + 2 * q_bytes));
  if (block == nullptr) return false;
  const Workspace w = Workspace::carve(reinterpret_cast<float*>(block), tq, tkv, D);
  char* const k = block + scratch_bytes;
  char* const v = k + kv_bytes;
  char* const q = v + kv_bytes;
  char* const o = q + q_bytes;
  unsigned seed = 12345;
  auto next = [&seed] { seed = seed * 1664525u + 1013904223u; return float(int(seed >> 9) - (1 << 22)) / float(1 << 22); };
  for (std::int64_t i = 0; i < seq_kv * D; ++i) {
    detail::store_from_f32(k, DT, i, next());
    detail::store_from_f32(v, DT, i, next());
  }
  for (std::int64_t i = 0; i < std::int64_t(tq) * D; ++i) detail::store_from_f32(q, DT, i, next());
  for (int i = 0; i < D * tq; ++i) w.qt[i] = next() * 0.125f;
  load_tile<DT>(k, D, tkv, D, w.kbuf);
  load_tile<DT>(v, D, tkv, D, w.vbuf);
  auto reset_state = [&] {
    for (int i = 0; i < tq; ++i) {
      w.m[i] = kNegInf;
      w.l[i] = 0.0f;
    }
  };
  reset_state();
  for (int i = 0; i < D * tq; ++i) w.ot[i] = 0.0f;

  testing::StageReport r{};
  const double flops = 2.0 * tq * tkv * D;
  auto add = [&r](const char* name, double ns, double stage_flops, bool reference = false) {
    r.stages[r.count++] = {name, ns, stage_flops, reference};
  };
  r.peak_unit = "FMA";
  bool timed = false;
#if defined(FA_HAVE_BF16_PAIRS)
  if constexpr (PairEngine::kHandles<DT>) {
    if (D % 32 == 0 && tkv % 32 == 0) {  // as pair_tile_path_fits
      time_pair_stages<DT>(cfg, w, q, k, v, add);
      r.peak_unit = PairEngine::kUnit;
      timed = true;
    }
  }
#endif
  if (!timed)   {
    [[maybe_unused]] auto qk = [&] { gemm<false>(w.kbuf, D, 1, tkv, D, w.qt, tq, nvec, w.st, tq, nullptr); };
    [[maybe_unused]] auto sm = [&] { scaled_softmax_tile<DT>(w, tkv, nvec, tq, 0.18f); };
    [[maybe_unused]] auto pv = [&] { gemm<true>(w.vbuf, 1, D, D, tkv, w.st, tq, nvec, w.ot, tq, w.alpha); };
    [[maybe_unused]] auto cv = [&] {
      load_tile<DT>(k, D, tkv, D, w.kbuf);
      load_tile<DT>(v, D, tkv, D, w.vbuf);
    };
    qk();  // Sᵀ holds real scores before the softmax is timed
    add("Q*K^T (microkernel)", ns_per_call(qk, cfg.seconds), flops);
    add(kHalfSoftmax<DT> ? "softmax in fp16 (OFF build)" : "softmax (exp2, max, sum)", ns_per_call(sm, cfg.seconds), 0);
    reset_state();
    add("P*V (microkernel)", ns_per_call(pv, cfg.seconds), flops);
    add(DT == DType::kF32 ? "K/V copy" : "K/V conversion", ns_per_call(cv, cfg.seconds), 0);
  }
  double t4 = 0;
  for (int i = 0; i < r.count; ++i) t4 += r.stages[i].ns;

  detail::AttentionJob job{};
  job.q = q;
  job.k = k;
  job.v = v;
  job.o = o;
  job.dtype = DT;
  job.kv_dtype = DT;  // else the pair path declines the job (pair_tile_path_fits) and the FMA loop runs it
  job.o_dtype = DT;
  job.batch = 1;
  job.seq_q = tq;
  job.seq_kv = seq_kv;
  job.heads = 1;
  job.kv_group = 1;
  job.head_dim = D;
  job.q_strides[2] = job.k_strides[2] = job.v_strides[2] = job.o_strides[2] = D;
  job.scale_log2 = 0.18f;
  job.tile_q = tq;
  job.tile_kv = tkv;
  job.threads = 1;
  job.q_tiles = 1;
  job.num_splits = 1;
  job.pack_group = 1;
  job.q_step = tq;
  job.row_rows = detail::kRowPathMaxRows;  // tq >= 16: the tile loop
  job.lse_strides[0] = job.lse_strides[1] = tq;
  job.split_keys = seq_kv;
  const double item = ns_per_call([&] { run_q_tile<DT, false>(job, w, tile_item(job, 0, 0, 0)); }, cfg.seconds);
  r.item_overhead_ns = item - cfg.tiles_per_item * t4;
#if defined(FA_HAVE_AMX)
  if (timed) {
    r.peak_gflops_one_thread = amx_peak_one_thread(cfg.seconds);
  } else
#elif defined(FA_HAVE_BF16_DOT)
  if (timed) {
    r.peak_gflops_one_thread = dot_peak_one_thread(cfg.seconds);
  } else
#endif
  {
    r.peak_gflops_one_thread = fma_peak_one_thread(cfg.seconds);
  }
  std::free(block);
  *out = r;
  return true;
}

// False for an FP8 dtype (the timer builds its inputs in the dtype timed) or
// when its memory cannot be had.
inline bool time_stages(const testing::StageConfig& cfg, testing::StageReport* out) {
  switch (cfg.dtype) {
    case DType::kF32: return time_stages_typed<DType::kF32>(cfg, out);
    case DType::kF16: return time_stages_typed<DType::kF16>(cfg, out);
    case DType::kBF16: return time_stages_typed<DType::kBF16>(cfg, out);
    default: return false;
  }
}

}  // namespace fa::FA_KERNEL_NS
