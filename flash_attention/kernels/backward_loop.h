// FlashAttention-2's backward pass on one path: P recomputed tile by tile
// from the forward's log-sum-exp, with the forward's own masks and score
// modifiers (tile_mask.h, score_modifiers.h), so the P the backward
// differentiates is the forward's.  Parallel loops, each item owning what it
// writes:
//   pass 0, item (batch, head):       D_i = dO_i · O_i, and the sinks' partials;
//   whole heads, item (batch,         every K/V tile in order: dV = Σ (P∘Z)ᵀ dO,
//           K/V head):                dK = scale Σ dS'ᵀ Q, and each block's
//                                     scale · dS' K into the group's dQ;
//   or pass 1, item (batch, K/V       dV and dK of one K/V tile over the
//           head, K/V tile):          group's query heads and Q tiles,
//   and pass 2, item (batch, head,    dQ = scale Σ dS' K over the K/V tiles
//           Q tile):                  (with dbias: item (bias head, Q tile),
//                                     every batch entry and sharing head in turn).
// dS = P ∘ (Z ∘ dP − D) with dP = dO Vᵀ (Z: the dropout factors), dS' = dS
// through softcap's tanh.  Whole heads take five products a block; the
// split passes seven (pass 2 recomputes S and dP) but many more items, for
// few heads on many threads.  Both sum the same blocks in the same order
// with the same code: the same bits whatever the thread count or the scheme
// (docs/DESIGN.md, "The backward pass").
//
// The products run on the path's FMA microkernel (microkernel.h), or for
// bf16 inputs as bf16 pair products (backward_pairs.h: VDPBF16PS on
// avx512bf16, TDPBF16PS tiles on amx), whose operands a packing pass lays
// out once per call.
//
// Compiled inside the path's namespace, after its vec_<isa>.h.
#pragma once

#include <cstring>
#include <optional>

#include "../common/thread_pool.h"
#include "backward_job.h"
#include "microkernel.h"
#include "score_modifiers.h"
#include "tile_mask.h"
#include "vec_io.h"
#if defined(FA_HAVE_BF16_DOT) || defined(FA_HAVE_AMX)
#define FA_BACKWARD_PAIRS 1
#include "engines.h"  // the pair engine: bf16_dot_path.h or amx_tile_path.h
#include "backward_pairs.h"
#endif

namespace fa::FA_KERNEL_NS {

using detail::BackwardJob;

inline int round_up_to(int n, int m) { return (n + m - 1) / m * m; }

// Whether DT's products run on bf16 pairs on this path (VDPBF16PS or the
// tile unit).
template <DType DT>
inline constexpr bool kPairProducts =
#if defined(FA_BACKWARD_PAIRS)
    DT == DType::kBF16;
#else
    false;
#endif

// head_dim padded to the vector width, or on the tile unit to its 16 pairs
// (the products' reduction over head_dim).
#if defined(FA_HAVE_AMX)
inline constexpr int kDimStep = 32;
#else
inline constexpr int kDimStep = Vec::W;
#endif
// A Q tile's rows padded to whole vectors, or for pair products to the
// reduction step (dV's and dK's reduction runs over them).
template <DType DT>
inline int lane_step() {
#if defined(FA_BACKWARD_PAIRS)
  if constexpr (kPairProducts<DT>) return kPairReduceStep;
#endif
  return Vec::W;
}

// One thread's scratch.  Rows of Q, dO, K, V and the accumulators are Dp =
// head_dim rounded up to kDimStep (zero columns beyond head_dim);
// tile-by-tile buffers are Sᵀ-shaped, [K/V tile row][Q tile lane], like the
// forward's, so its mask and modifiers apply to them as they are.
struct BackwardScratch {
  float* k;      // [tile_kv][Dp]  K tile
  float* v;      // [tile_kv][Dp]  V tile
  float* dk;     // [tile_kv][Dp]  a K/V tile's dK accumulator (without the scale)
  float* dv;     // [tile_kv][Dp]  a K/V tile's dV accumulator
  float* q;      // [tile_q][Dp]   Q tile
  float* dout;   // [tile_q][Dp]   dO tile
  float* dq;     // [tile_q][Dp]   pass 2: dQ accumulator (without the scale)
  float* qt;     // [Dp][tile_q]   Qᵀ
  float* dot;    // [Dp][tile_q]   dOᵀ
  float* p;      // [tile_kv][tile_q] Sᵀ, then Pᵀ
  float* pz;     // [tile_kv][tile_q] (P ∘ Z)ᵀ under dropout (else p is used)
  float* ds;     // [tile_kv][tile_q] dPᵀ, then dSᵀ, then dS'ᵀ
  float* cap;    // [tile_kv][tile_q] softcap: 1 - tanh² of each score
  float* lse2;   // [tile_q] the rows' LSE in log2 units (+inf: the row attends nothing)
  float* delta;  // [tile_q] the rows' D_i
  float* ones;   // [max(Dp, tile_q)] the accumulating products' column scale
  // Pair products: one block's packed operands as bf16 pairs: the A
  // operands (P∘Z)ᵀ (`pairs`) and dS'ᵀ (`ds_pairs`), [tile_kv][tile_q / 2],
  // and the B operand dS'ᵀ of dQᵀ (`dsb_pairs`), [tile_q / 16][tile_kv / 2][16].
  std::uint32_t* pairs;
  std::uint32_t* ds_pairs;
  std::uint32_t* dsb_pairs;
  // A whole-head item (BackwardJob::whole_heads): the dQ accumulators of its
  // group's heads, [kv_group][q_tiles] of accumulate_dq's [tile_q][Dp] (FMA
  // products) or [Dp][tile_q] (pair products).
  float* dq_heads;

  static std::size_t dq_heads_floats(const BackwardJob& job) {
    if (!job.whole_heads) return 0;
    const std::size_t q_tiles = static_cast<std::size_t>((job.fwd.seq_q + job.fwd.tile_q - 1) / job.fwd.tile_q);
    return static_cast<std::size_t>(job.fwd.kv_group) * q_tiles * job.fwd.tile_q * padded_dim(job);
  }

  static int padded_dim(const BackwardJob& job) { return round_up_to(static_cast<int>(job.fwd.head_dim), kDimStep); }
  static std::size_t floats(const BackwardJob& job) {
    const std::size_t tq = job.fwd.tile_q, tk = job.fwd.tile_kv, dp = padded_dim(job);
    return pad16(tk * dp) * 4 + pad16(tq * dp) * 5 + pad16(tk * tq) * 4 + pad16(tq) * 2 + pad16(dp > tq ? dp : tq) +
           pad16(tk * tq / 2) * 3 + dq_heads_floats(job);
  }
  static BackwardScratch carve(const BackwardJob& job, float* f) {
    const std::size_t tq = job.fwd.tile_q, tk = job.fwd.tile_kv, dp = padded_dim(job);
    BackwardScratch w;
    for (float** b : {&w.k, &w.v, &w.dk, &w.dv}) *b = f, f += pad16(tk * dp);
    for (float** b : {&w.q, &w.dout, &w.dq, &w.qt, &w.dot}) *b = f, f += pad16(tq * dp);
    for (float** b : {&w.p, &w.pz, &w.ds, &w.cap}) *b = f, f += pad16(tk * tq);
    w.lse2 = f, f += pad16(tq);
    w.delta = f, f += pad16(tq);
    w.ones = f, f += pad16(dp > tq ? dp : tq);
    for (std::size_t i = 0; i < (dp > tq ? dp : tq); ++i) w.ones[i] = 1.0f;
    for (std::uint32_t** b : {&w.pairs, &w.ds_pairs, &w.dsb_pairs}) *b = reinterpret_cast<std::uint32_t*>(f), f += pad16(tk * tq / 2);
    w.dq_heads = f;
    return w;
  }
};

inline std::size_t backward_workspace_floats(const BackwardJob& job) { return BackwardScratch::floats(job); }

// The call's operands packed as bf16 pairs (pair products only), in the
// job's `pairs` buffer: every Q tile's qb, dob, qr and dor (tile_q x Dp / 2
// pairs each) of each (batch, head), then every K/V tile's ka, va and kt
// (tile_kv x Dp / 2 each) of each (batch, K/V head).
struct PairPacks {
  std::uint32_t* base;
  std::int64_t q_tiles, kv_tiles, q_part, kv_part, q_side;

  static PairPacks of(const BackwardJob& job) {
    const detail::AttentionJob& f = job.fwd;
    PairPacks k;
    k.base = job.pairs;
    k.q_tiles = (f.seq_q + f.tile_q - 1) / f.tile_q;
    k.kv_tiles = (f.seq_kv + f.tile_kv - 1) / f.tile_kv;
    const std::int64_t dp = BackwardScratch::padded_dim(job);
    k.q_part = f.tile_q * dp / 2;
    k.kv_part = f.tile_kv * dp / 2;
    k.q_side = f.batch * f.heads * k.q_tiles * 4 * k.q_part;
    return k;
  }
  std::int64_t total(const BackwardJob& job) const {
    return q_side + job.fwd.batch * (job.fwd.heads / job.fwd.kv_group) * kv_tiles * 3 * kv_part;
  }
  // Part i (qb, dob, qr, dor) of Q tile qi of (b, h).
  std::uint32_t* q(const BackwardJob& job, std::int64_t b, std::int64_t h, std::int64_t qi, int i) const {
    return base + ((b * job.fwd.heads + h) * q_tiles + qi) * 4 * q_part + i * q_part;
  }
  // Part i (ka, va, kt) of K/V tile kt of (b, hk).
  std::uint32_t* kv(const BackwardJob& job, std::int64_t b, std::int64_t hk, std::int64_t kt, int i) const {
    const std::int64_t kv_heads = job.fwd.heads / job.fwd.kv_group;
    return base + q_side + ((b * kv_heads + hk) * kv_tiles + kt) * 3 * kv_part + i * kv_part;
  }
};

// Pairs the packed operands of a job take (0 where the products are FMA).
inline std::size_t backward_pair_pack_u32(const BackwardJob& job) {
#if defined(FA_BACKWARD_PAIRS)
  if (job.fwd.dtype == DType::kBF16) {
    BackwardJob sized = job;
    sized.pairs = nullptr;
    return static_cast<std::size_t>(PairPacks::of(sized).total(job));
  }
#endif
  (void)job;
  return 0;
}

// `rows` rows (`row_stride` elements apart) of a DT tensor into fp32 [.][Dp],
// and zero rows up to `fill_rows` (the lanes of a partial vector).
template <DType DT>
inline void load_rows(const void* base, std::int64_t row_stride, int rows, int fill_rows, int D, int Dp, float* dst) {
  const std::size_t es = dtype_size(DT);
  for (int r = 0; r < rows; ++r) {
    load_tile<DT>(static_cast<const char*>(base) + r * row_stride * es, 0, 1, D, dst + std::int64_t(r) * Dp);
    for (int d = D; d < Dp; ++d) dst[std::int64_t(r) * Dp + d] = 0.0f;
  }
  for (int r = rows; r < fill_rows; ++r) std::memset(dst + std::int64_t(r) * Dp, 0, sizeof(float) * Dp);
}

// [lanes][Dp] -> [Dp][tq], in 16 x 16 blocks so each line written fills.
inline void transpose_rows(const float* src, int lanes, int Dp, float* dst, int tq) {
  for (int r0 = 0; r0 < lanes; r0 += 16) {
    for (int d0 = 0; d0 < Dp; d0 += 16) {
      for (int r = r0; r < r0 + 16 && r < lanes; ++r) {
        for (int d = d0; d < d0 + 16 && d < Dp; ++d) dst[std::int64_t(d) * tq + r] = src[std::int64_t(r) * Dp + d];
      }
    }
  }
}

// Writes `rows` fp32 rows [.][Dp] times `mul` into a gradient view.
inline void store_rows(void* base, DType dtype, std::int64_t row_stride, int rows, int D, int Dp, const float* src,
                       float mul) {
  for (int r = 0; r < rows; ++r) {
    const float* in = src + std::int64_t(r) * Dp;
    const std::int64_t at = r * row_stride;
    int d = 0;
    for (; d + Vec::W <= D; d += Vec::W) {
      const typename Vec::T x = Vec::mul(Vec::load(in + d), Vec::set1(mul));
      switch (dtype) {
        case DType::kF16: store_vec<DType::kF16>(base, at + d, x, false); break;
        case DType::kBF16: store_vec<DType::kBF16>(base, at + d, x, false); break;
        default: store_vec<DType::kF32>(base, at + d, x, false); break;
      }
    }
    for (; d < D; ++d) detail::store_from_f32(base, dtype, at + d, in[d] * mul);
  }
}

// The rows of one Q tile of (batch b, head h): Q and dO as rows and
// transposed, their LSE (log2 units) and D.
struct QTile {
  std::int64_t b, h, i0;
  int rows, lanes;  // rows, and rows rounded up to whole vectors
};

// Q and dO rows (fp32 [lanes][Dp], zero past the rows) and transposed.
template <DType DT>
inline void load_q_rows(const BackwardJob& job, const BackwardScratch& w, const QTile& t) {
  const detail::AttentionJob& f = job.fwd;
  const int D = static_cast<int>(f.head_dim), Dp = BackwardScratch::padded_dim(job), tq = f.tile_q;
  const std::size_t es = dtype_size(DT);
  const char* q = static_cast<const char*>(f.q) + (t.b * f.q_strides[0] + t.h * f.q_strides[1] + t.i0 * f.q_strides[2]) * es;
  const char* g = static_cast<const char*>(job.dout) +
                  (t.b * job.dout_strides[0] + t.h * job.dout_strides[1] + t.i0 * job.dout_strides[2]) * es;
  load_rows<DT>(q, f.q_strides[2], t.rows, t.lanes, D, Dp, w.q);
  load_rows<DT>(g, job.dout_strides[2], t.rows, t.lanes, D, Dp, w.dout);
  transpose_rows(w.q, t.lanes, Dp, w.qt, tq);
  transpose_rows(w.dout, t.lanes, Dp, w.dot, tq);
}

// The rows' LSE in log2 units and D.
inline void load_row_stats(const BackwardJob& job, const BackwardScratch& w, const QTile& t) {
  const detail::AttentionJob& f = job.fwd;
  const float* lse = f.lse + t.b * f.lse_strides[0] + t.h * f.lse_strides[1] + t.i0;
  const float* delta = job.delta + (t.b * f.heads + t.h) * f.seq_q + t.i0;
  for (int r = 0; r < t.lanes; ++r) {
    // A row that attends nothing (LSE -inf) and the padding lanes get P = 0
    // from exp2(s - inf); (their scores are -inf or 0, never +inf).
    const bool live = r < t.rows && lse[r] != kNegInf;
    w.lse2[r] = live ? lse[r] * 1.4426950408889634f : __builtin_inff();
    w.delta[r] = r < t.rows ? delta[r] : 0.0f;
  }
}

// K and V rows [cols][Dp], zero rows to fill_rows.
template <DType DT>
inline void load_kv_rows(const BackwardJob& job, const BackwardScratch& w, std::int64_t b, std::int64_t hk, std::int64_t j0,
                         int cols, int fill_rows) {
  const detail::AttentionJob& f = job.fwd;
  const int D = static_cast<int>(f.head_dim), Dp = BackwardScratch::padded_dim(job);
  const std::size_t es = dtype_size(DT);
  const char* k = static_cast<const char*>(f.k) + (b * f.k_strides[0] + hk * f.k_strides[1] + j0 * f.k_strides[2]) * es;
  const char* v = static_cast<const char*>(f.v) + (b * f.v_strides[0] + hk * f.v_strides[1] + j0 * f.v_strides[2]) * es;
  load_rows<DT>(k, f.k_strides[2], cols, fill_rows, D, Dp, w.k);
  load_rows<DT>(v, f.v_strides[2], cols, fill_rows, D, Dp, w.v);
}

// Whether some row of [i0, i0 + rows) may attend some key of [j0, j0 + cols)
// (windows move forward with the row: the first row's begin and the last
// row's end bound them all).
inline bool block_live(const detail::AttentionJob& f, std::int64_t i0, int rows, std::int64_t j0, int cols) {
  if (!f.window.active) return true;
  return j0 < key_end(f, i0 + rows - 1) && j0 + cols > key_begin(f, i0);
}

// The forward job split for the backward's modifiers: softcap alone (its
// tanh is kept for the chain rule), then ALiBi and the bias.
struct ModifierJobs {
  detail::AttentionJob softcap, others;
  explicit ModifierJobs(const detail::AttentionJob& f) : softcap(f), others(f) {
    softcap.alibi_slopes = nullptr;
    softcap.bias = nullptr;
    others.softcap_log2 = 0.0f;
  }
};

// The operands one (Q tile, K/V tile) block's products read: fp32 rows
// and transposes in the thread's scratch (FMA products), or the call's
// packed pairs (pair products; null otherwise).
struct BlockOperands {
  const std::uint32_t* qb = nullptr;  // Q tile: qb, dob, qr, dor
  const std::uint32_t* dob = nullptr;
  const std::uint32_t* qr = nullptr;
  const std::uint32_t* dor = nullptr;
  const std::uint32_t* ka = nullptr;  // K/V tile: ka, va, kt
  const std::uint32_t* va = nullptr;
  const std::uint32_t* kt = nullptr;
};

// Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, raw, into w.p and w.ds (`which`: 0, 1).
template <DType DT>
inline void block_scores(const BackwardJob& job, const BackwardScratch& w, const BlockOperands& ops, const QTile& t,
                         int cols, int which) {
  const int D = static_cast<int>(job.fwd.head_dim), Dp = BackwardScratch::padded_dim(job), tq = job.fwd.tile_q;
  float* out = which == 0 ? w.p : w.ds;
  if constexpr (kPairProducts<DT>) {
#if defined(FA_BACKWARD_PAIRS)
    pair_gemm<false>(which == 0 ? ops.ka : ops.va, Dp / 2, round_up_to(cols, kPairRowStep), which == 0 ? ops.qb : ops.dob,
                     Dp, t.lanes, out, tq);
#endif
  } else {
    (void)ops;
    gemm<false>(which == 0 ? w.k : w.v, Dp, 1, cols, D, which == 0 ? w.qt : w.dot, tq, t.lanes / Vec::W, out, tq, nullptr);
  }
}

// Sᵀ (w.p) times the head's score scale, into log2 units.
inline void scale_scores(const BackwardJob& job, const BackwardScratch& w, const QTile& t, int cols) {
  const typename Vec::T scale = Vec::set1(score_scale(job.fwd, t.h));
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < t.lanes; r += Vec::W) {
      float* s = w.p + std::int64_t(c) * job.fwd.tile_q + r;
      Vec::store(s, Vec::mul(Vec::load(s), scale));
    }
  }
}

// One (Q tile, K/V tile) block: Pᵀ (w.p), (P ∘ Z)ᵀ (returned: w.pz under
// dropout, else w.p) and dSᵀ in natural units (w.ds), from the loaded Q,
// dO, K and V.  With softcap, w.cap holds 1 - tanh².
template <DType DT>
inline const float* block_gradients(const BackwardJob& job, const ModifierJobs& mods, const BackwardScratch& w,
                                    const BlockOperands& ops, const QTile& t, std::int64_t j0, int cols) {
  const detail::AttentionJob& f = job.fwd;
  const int tq = f.tile_q;
  // Sᵀ = K Qᵀ, scaled into log2 units with its modifiers, masked.
  block_scores<DT>(job, w, ops, t, cols, 0);
  scale_scores(job, w, t, cols);
  if (f.softcap_log2 > 0.0f) {
    modify_scores(mods.softcap, t.h, t.i0, t.lanes, j0, cols, w.p, tq, 1);
    const typename Vec::T inv = Vec::set1(1.0f / f.softcap_log2), one = Vec::set1(1.0f);
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < t.lanes; r += Vec::W) {
        const typename Vec::T th = Vec::mul(Vec::load(w.p + std::int64_t(c) * tq + r), inv);
        Vec::store(w.cap + std::int64_t(c) * tq + r, Vec::sub(one, Vec::mul(th, th)));
      }
    }
  }
  // ALiBi and the bias read rows up to i0 + rows only (padding lanes stay
  // finite and get P = 0 from their LSE).
  if (f.alibi_slopes || f.bias) modify_scores(mods.others, t.h, t.i0, t.rows, j0, cols, w.p, tq, 1);
  mask_tile(f, t.i0, t.rows, j0, cols, w.p, tq);
  // Pᵀ = 2^(s - lse).
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < t.lanes; r += Vec::W) {
      float* s = w.p + std::int64_t(c) * tq + r;
      Vec::store(s, Vec::exp2(Vec::sub(Vec::load(s), Vec::load(w.lse2 + r))));
    }
  }
  const float* pz = w.p;
  if (f.dropout.active) {
    const std::int64_t bh = t.b * f.heads + t.h;
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < t.lanes; ++r) {
        const std::int64_t at = std::int64_t(c) * tq + r;
        w.pz[at] = r < t.rows ? w.p[at] * detail::dropout_factor(f.dropout, bh, t.i0 + r, j0 + c) : 0.0f;
      }
    }
    pz = w.pz;
  }
  // dPᵀ = V dOᵀ, then dSᵀ = (P∘Z)ᵀ ∘ dPᵀ − Pᵀ ∘ D (Z ∘ dP ∘ P = (P∘Z) ∘ dP).
  block_scores<DT>(job, w, ops, t, cols, 1);
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < t.lanes; r += Vec::W) {
      const std::int64_t at = std::int64_t(c) * tq + r;
      Vec::store(w.ds + at, Vec::sub(Vec::mul(Vec::load(pz + at), Vec::load(w.ds + at)),
                                     Vec::mul(Vec::load(w.p + at), Vec::load(w.delta + r))));
    }
  }
  return pz;
}

// dS' = dS ∘ (1 - tanh²) where softcap is on.
inline void apply_softcap_chain(const BackwardJob& job, const BackwardScratch& w, const QTile& t, int cols) {
  if (job.fwd.softcap_log2 <= 0.0f) return;
  const int tq = job.fwd.tile_q;
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < t.lanes; r += Vec::W) {
      const std::int64_t at = std::int64_t(c) * tq + r;
      Vec::store(w.ds + at, Vec::mul(Vec::load(w.ds + at), Vec::load(w.cap + at)));
    }
  }
}

// Pass 0: D_i = dO_i · O_i of every row of (b, h), and its sink's partial.
template <DType DT>
inline void delta_item(const BackwardJob& job, std::int64_t bh) {
  const detail::AttentionJob& f = job.fwd;
  const std::int64_t b = bh / f.heads, h = bh % f.heads;
  const int D = static_cast<int>(f.head_dim);
  const std::size_t es = dtype_size(DT);
  float* delta = job.delta + bh * f.seq_q;
  double sink_part = 0.0;
  for (std::int64_t i = 0; i < f.seq_q; ++i) {
    const char* o = static_cast<const char*>(f.o) + (b * f.o_strides[0] + h * f.o_strides[1] + i * f.o_strides[2]) * es;
    const char* g = static_cast<const char*>(job.dout) +
                    (b * job.dout_strides[0] + h * job.dout_strides[1] + i * job.dout_strides[2]) * es;
    // Whole vectors of dims, then the rest (head_dim is a multiple of 8).
    typename Vec::T acc = Vec::zero();
    int d = 0;
    for (; d + Vec::W <= D; d += Vec::W) acc = Vec::fmadd(load_vec<DT>(o, d), load_vec<DT>(g, d), acc);
    float sum = Vec::reduce_add(acc);
    for (; d < D; ++d) sum += load_scalar<DT>(o, d) * load_scalar<DT>(g, d);
    delta[i] = sum;
    if (job.sink_parts) {
      const float lse = f.lse[b * f.lse_strides[0] + h * f.lse_strides[1] + i];
      if (lse != kNegInf) sink_part -= std::exp(double(f.sinks[h]) - double(lse)) * double(sum);
    }
  }
  if (job.sink_parts) job.sink_parts[bh] = static_cast<float>(sink_part);
}

// The Q tiles of one head that may reach keys [j0, j0 + cols) (all of them
// without a window).
template <DType DT>
inline QTile q_tile(const BackwardJob& job, std::int64_t b, std::int64_t h, std::int64_t qt) {
  const detail::AttentionJob& f = job.fwd;
  QTile t{b, h, qt * f.tile_q, 0, 0};
  t.rows = static_cast<int>(f.seq_q - t.i0 < f.tile_q ? f.seq_q - t.i0 : f.tile_q);
  t.lanes = round_up_to(t.rows, lane_step<DT>());
  return t;
}

// dbias += dS over the block's rows and keys (`dbias`: the bias head's
// [seq_q][seq_kv] rows; null: no dbias).  The bias is added after softcap,
// so its gradient is dS itself, before softcap's chain.
inline void add_block_dbias(const BackwardJob& job, const BackwardScratch& w, const QTile& t, std::int64_t j0, int cols,
                            float* dbias) {
  if (!dbias) return;
  const detail::AttentionJob& f = job.fwd;
  for (int r = 0; r < t.rows; ++r) {
    float* row = dbias + (t.i0 + r) * f.seq_kv + j0;
    for (int c = 0; c < cols; ++c) row[c] += w.ds[std::int64_t(c) * f.tile_q + r];
  }
}

#if defined(FA_BACKWARD_PAIRS)
// Whether a block's pair operands come from one fused pass over Sᵀ and dPᵀ
// (fused_block_pairs): not under dropout, softcap, ALiBi, the bias or
// dbias, whose own passes read and write the fp32 tiles in between.
inline bool fused_pair_block(const BackwardJob& job) {
  const detail::AttentionJob& f = job.fwd;
  return !f.dropout.active && f.softcap_log2 <= 0.0f && !f.alibi_slopes && !f.bias && !job.dbias;
}

// A block's pair operands from fp32 (P∘Z)ᵀ (`pz`) and dS'ᵀ (w.ds): with
// kRows dV's and dK's A operands (w.pairs, w.ds_pairs: rows are keys, zero
// past the tile's), with kDq dQᵀ's B operand (w.dsb_pairs, zero past the
// tile's keys to the reduction's step).
template <bool kRows, bool kDq>
inline void pack_block_pairs(const BackwardJob& job, const BackwardScratch& w, const QTile& t, int cols, const float* pz) {
  const int tq = job.fwd.tile_q;
  if constexpr (kRows) {
    const int m = round_up_to(cols, kPairRowStep);
    pack_a_rows(pz, tq, cols, m, t.lanes, w.pairs, tq / 2);
    pack_a_rows(w.ds, tq, cols, m, t.lanes, w.ds_pairs, tq / 2);
  }
  if constexpr (kDq) {
    const int keys = round_up_to(cols, kPairReduceStep);
    for (int c = cols; c < keys; ++c) std::memset(w.ds + std::int64_t(c) * tq, 0, sizeof(float) * t.lanes);
    pack_b_pairs(w.ds, tq, keys, t.lanes, w.dsb_pairs);
  }
}

// The same operands in one pass from raw Sᵀ (w.p; `scale` takes it to log2
// units, or is 1 where w.p holds the scaled and masked scores) and dPᵀ
// (w.ds), without the fp32 Pᵀ and dSᵀ written and read back between
// passes: Pᵀ = 2^(s - lse), dSᵀ = Pᵀ ∘ dPᵀ − Pᵀ ∘ D, with the
// operations of block_gradients, so the same bits as its passes and
// pack_block_pairs.
template <bool kRows, bool kDq>
inline void fused_block_pairs(const BackwardJob& job, const BackwardScratch& w, const QTile& t, int cols, float scale) {
  const int tq = job.fwd.tile_q;
  const int m = round_up_to(cols, kPairRowStep), keys = kDq ? round_up_to(cols, kPairReduceStep) : m;
  const typename Vec::T sc = Vec::set1(scale);
  auto* p_rows = reinterpret_cast<std::uint16_t*>(w.pairs);  // bf16 [key][tq]
  auto* ds_rows = reinterpret_cast<std::uint16_t*>(w.ds_pairs);
  const __m256i zero = _mm256_setzero_si256();
  for (int r = 0; r < t.lanes; r += Vec::W) {
    const typename Vec::T lse = Vec::load(w.lse2 + r), d = Vec::load(w.delta + r);
    std::uint32_t* dsb = w.dsb_pairs + std::int64_t(r / 16) * (keys / 2) * 16;
    for (int c = 0; c < keys; c += 2) {
      __m256i ds_h[2];
      for (int e = 0; e < 2; ++e) {
        const int key = c + e;
        const std::int64_t at = std::int64_t(key) * tq + r;
        if (key < cols) {
          const typename Vec::T p = Vec::exp2(Vec::sub(Vec::mul(Vec::load(w.p + at), sc), lse));
          const typename Vec::T ds = Vec::sub(Vec::mul(p, Vec::load(w.ds + at)), Vec::mul(p, d));
          ds_h[e] = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(ds));
          if constexpr (kRows) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p_rows + at), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds_rows + at), ds_h[e]);
          }
        } else {
          ds_h[e] = zero;
          if (kRows && key < m) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p_rows + at), zero);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(ds_rows + at), zero);
          }
        }
      }
      if constexpr (kDq) {
        _mm512_storeu_si512(dsb + (c / 2) * 16, _mm512_or_si512(_mm512_cvtepu16_epi32(ds_h[0]),
                                                                _mm512_slli_epi32(_mm512_cvtepu16_epi32(ds_h[1]), 16)));
      }
    }
  }
}

// One block's pair operands (pack_block_pairs' kRows and kDq), and its
// share of dbias where `dbias` is given; fused where fused_pair_block
// allows.
template <DType DT, bool kRows, bool kDq>
inline void block_pair_operands(const BackwardJob& job, const ModifierJobs& mods, const BackwardScratch& w,
                                const BlockOperands& ops, const QTile& t, std::int64_t j0, int cols,
                                float* dbias = nullptr) {
  const detail::AttentionJob& f = job.fwd;
  if (!fused_pair_block(job)) {
    const float* pz = block_gradients<DT>(job, mods, w, ops, t, j0, cols);
    add_block_dbias(job, w, t, j0, cols, dbias);
    apply_softcap_chain(job, w, t, cols);
    pack_block_pairs<kRows, kDq>(job, w, t, cols, pz);
    return;
  }
  block_scores<DT>(job, w, ops, t, cols, 0);
  block_scores<DT>(job, w, ops, t, cols, 1);
  float scale = score_scale(f, t.h);
  if (f.mask || tile_crosses_window(f, t.i0, t.rows, j0, cols)) {  // masked in log2 units, as block_gradients does
    scale_scores(job, w, t, cols);
    mask_tile(f, t.i0, t.rows, j0, cols, w.p, f.tile_q);
    scale = 1.0f;  // (s x 1 = s: the same bits)
  }
  fused_block_pairs<kRows, kDq>(job, w, t, cols, scale);
}
#endif

// dQ += dS' K for one block into `dq`: [tile_q][Dp] for FMA products
// (A(r, c) = dS'ᵀ[c][r]); for pair products its transpose [Dp][tile_q],
// dQᵀ += Kᵀ dS'ᵀ, from the block's packed w.dsb_pairs (a B operand that
// packs from dS'ᵀ with whole vectors, where dS' itself as an A operand took
// a scalar store a pair).
template <DType DT>
inline void accumulate_dq(const BackwardJob& job, const BackwardScratch& w, const BlockOperands& ops, const QTile& t,
                          int cols, float* dq) {
  const int Dp = BackwardScratch::padded_dim(job), tq = job.fwd.tile_q;
  if constexpr (kPairProducts<DT>) {
#if defined(FA_BACKWARD_PAIRS)
    pair_gemm<true>(ops.kt, job.fwd.tile_kv / 2, Dp, w.dsb_pairs, round_up_to(cols, kPairReduceStep), t.lanes, dq, tq);
#endif
  } else {
    (void)ops;
    gemm<true, false>(w.ds, 1, tq, t.rows, cols, w.k, Dp, Dp / Vec::W, dq, Dp, w.ones);
  }
}

// Writes Q tile t's dQ from its accumulator (accumulate_dq's layout; the
// pair products' transpose turned back through w.qt, which they leave unused).
template <DType DT>
inline void store_dq(const BackwardJob& job, const BackwardScratch& w, const QTile& t, const float* acc) {
  const int D = static_cast<int>(job.fwd.head_dim), Dp = BackwardScratch::padded_dim(job);
  if constexpr (kPairProducts<DT>) {
    transpose_rows(acc, Dp, job.fwd.tile_q, w.qt, Dp);
    acc = w.qt;
  }
  const std::size_t es = dtype_size(job.grad_dtype[0]);
  char* out = static_cast<char*>(job.grad[0]) +
              (t.b * job.grad_strides[0][0] + t.h * job.grad_strides[0][1] + t.i0 * job.grad_strides[0][2]) * es;
  store_rows(out, job.grad_dtype[0], job.grad_strides[0][2], t.rows, D, Dp, acc, job.scale);
}

// Pass 1: dK and dV of K/V tile `kt` of (b, hk), over its group's heads;
// for a whole-head item also each block's dQ, into w.dq_heads.
template <DType DT>
inline void dkdv_item(const BackwardJob& job, const ModifierJobs& mods, const BackwardScratch& w, std::int64_t b,
                      std::int64_t hk, std::int64_t kt) {
  const detail::AttentionJob& f = job.fwd;
  const int D = static_cast<int>(f.head_dim), Dp = BackwardScratch::padded_dim(job), tq = f.tile_q;
  const std::int64_t j0 = kt * f.tile_kv;
  const int cols = static_cast<int>(f.seq_kv - j0 < f.tile_kv ? f.seq_kv - j0 : f.tile_kv);
  BlockOperands ops;
  [[maybe_unused]] const PairPacks packs = PairPacks::of(job);
  if constexpr (kPairProducts<DT>) {
    for (int i = 0; i < 3; ++i) (&ops.ka)[i] = packs.kv(job, b, hk, kt, i);
  } else {
    load_kv_rows<DT>(job, w, b, hk, j0, cols, cols);
  }
  std::memset(w.dk, 0, sizeof(float) * cols * Dp);
  std::memset(w.dv, 0, sizeof(float) * cols * Dp);
  const std::int64_t q_tiles = (f.seq_q + tq - 1) / tq;
  for (std::int64_t h = hk * f.kv_group; h < (hk + 1) * f.kv_group; ++h) {
    for (std::int64_t qi = 0; qi < q_tiles; ++qi) {
      const QTile t = q_tile<DT>(job, b, h, qi);
      if (!block_live(f, t.i0, t.rows, j0, cols)) continue;
      if constexpr (kPairProducts<DT>) {
        for (int i = 0; i < 4; ++i) (&ops.qb)[i] = packs.q(job, b, h, qi, i);
      } else {
        load_q_rows<DT>(job, w, t);
      }
      load_row_stats(job, w, t);
      // dV += (P∘Z)ᵀ dO and dK += dS'ᵀ Q: rows are keys, the reduction runs
      // over the tile's query rows.
      if constexpr (kPairProducts<DT>) {
#if defined(FA_BACKWARD_PAIRS)
        if (job.whole_heads) {
          block_pair_operands<DT, true, true>(job, mods, w, ops, t, j0, cols);
        } else {
          block_pair_operands<DT, true, false>(job, mods, w, ops, t, j0, cols);
        }
        const int m = round_up_to(cols, kPairRowStep);
        pair_gemm<true>(w.pairs, tq / 2, m, ops.dor, t.lanes, Dp, w.dv, Dp);
        pair_gemm<true>(w.ds_pairs, tq / 2, m, ops.qr, t.lanes, Dp, w.dk, Dp);
#endif
      } else {
        const float* pz = block_gradients<DT>(job, mods, w, ops, t, j0, cols);
        apply_softcap_chain(job, w, t, cols);
        gemm<true, false>(pz, tq, 1, cols, t.rows, w.dout, Dp, Dp / Vec::W, w.dv, Dp, w.ones);
        gemm<true, false>(w.ds, tq, 1, cols, t.rows, w.q, Dp, Dp / Vec::W, w.dk, Dp, w.ones);
      }
      if (job.whole_heads) {  // the same dS' pass 2 would recompute, summed in the same order
        const std::int64_t q_tiles_all = (f.seq_q + tq - 1) / tq;
        accumulate_dq<DT>(job, w, ops, t, cols,
                          w.dq_heads + ((h - hk * f.kv_group) * q_tiles_all + qi) * std::int64_t(tq) * Dp);
      }
    }
  }
  for (int g = 1; g <= 2; ++g) {
    const std::size_t es = dtype_size(job.grad_dtype[g]);
    char* out = static_cast<char*>(job.grad[g]) + (b * job.grad_strides[g][0] + hk * job.grad_strides[g][1] +
                                                   j0 * job.grad_strides[g][2]) * es;
    store_rows(out, job.grad_dtype[g], job.grad_strides[g][2], cols, D, Dp, g == 1 ? w.dk : w.dv, g == 1 ? job.scale : 1.0f);
  }
}

// Pass 2: dQ of Q tile `qi` of (b, h), and its rows' share of dbias.
template <DType DT>
inline void dq_tile(const BackwardJob& job, const ModifierJobs& mods, const BackwardScratch& w, std::int64_t b,
                    std::int64_t h, std::int64_t qi) {
  const detail::AttentionJob& f = job.fwd;
  const int Dp = BackwardScratch::padded_dim(job), tq = f.tile_q, tk = f.tile_kv;
  const QTile t = q_tile<DT>(job, b, h, qi);
  BlockOperands ops;
  [[maybe_unused]] const PairPacks packs = PairPacks::of(job);
  if constexpr (kPairProducts<DT>) {
    for (int i = 0; i < 4; ++i) (&ops.qb)[i] = packs.q(job, b, h, qi, i);
  } else {
    load_q_rows<DT>(job, w, t);
  }
  load_row_stats(job, w, t);
  std::memset(w.dq, 0, sizeof(float) * tq * Dp);
  float* dbias = job.dbias ? job.dbias + (job.bias_heads > 1 ? h : 0) * f.seq_q * f.seq_kv : nullptr;
  const std::int64_t hk = h / f.kv_group, kv_tiles = (f.seq_kv + tk - 1) / tk;
  for (std::int64_t kt = 0; kt < kv_tiles; ++kt) {
    const std::int64_t j0 = kt * tk;
    const int cols = static_cast<int>(f.seq_kv - j0 < tk ? f.seq_kv - j0 : tk);
    if (!block_live(f, t.i0, t.rows, j0, cols)) continue;
    if constexpr (kPairProducts<DT>) {
      for (int i = 0; i < 3; ++i) (&ops.ka)[i] = packs.kv(job, b, hk, kt, i);
    } else {
      load_kv_rows<DT>(job, w, b, hk, j0, cols, cols);
    }
    if constexpr (kPairProducts<DT>) {
#if defined(FA_BACKWARD_PAIRS)
      block_pair_operands<DT, false, true>(job, mods, w, ops, t, j0, cols, dbias);
#endif
    } else {
      block_gradients<DT>(job, mods, w, ops, t, j0, cols);
      add_block_dbias(job, w, t, j0, cols, dbias);
      apply_softcap_chain(job, w, t, cols);
    }
    accumulate_dq<DT>(job, w, ops, t, cols, w.dq);
  }
  store_dq<DT>(job, w, t, w.dq);
}

// A whole-head item: every K/V tile of (b, hk) in order (pass 1's items),
// each block's dQ summed as it goes, then the group's dQ written.  Five
// products a block where passes 1 and 2 take seven, and the same sums in
// the same order, so the same bits.
template <DType DT>
inline void whole_head_item(const BackwardJob& job, const ModifierJobs& mods, const BackwardScratch& w, std::int64_t b,
                            std::int64_t hk) {
  const detail::AttentionJob& f = job.fwd;
  const int Dp = BackwardScratch::padded_dim(job), tq = f.tile_q;
  const std::int64_t q_tiles = (f.seq_q + tq - 1) / tq, kv_tiles = (f.seq_kv + f.tile_kv - 1) / f.tile_kv;
  std::memset(w.dq_heads, 0, sizeof(float) * BackwardScratch::dq_heads_floats(job));
  for (std::int64_t kt = 0; kt < kv_tiles; ++kt) dkdv_item<DT>(job, mods, w, b, hk, kt);
  for (std::int64_t h = hk * f.kv_group; h < (hk + 1) * f.kv_group; ++h) {
    for (std::int64_t qi = 0; qi < q_tiles; ++qi) {
      store_dq<DT>(job, w, q_tile<DT>(job, b, h, qi),
                   w.dq_heads + ((h - hk * f.kv_group) * q_tiles + qi) * std::int64_t(tq) * Dp);
    }
  }
}

#if defined(FA_BACKWARD_PAIRS)
// The packing pass (pair products): item < q_items packs Q tile `item` of
// the (batch, head) rows (qb, dob, qr, dor), the rest K/V tiles (ka, va, kt).
template <DType DT>
inline void pack_item(const BackwardJob& job, const BackwardScratch& w, std::int64_t item) {
  const detail::AttentionJob& f = job.fwd;
  const PairPacks packs = PairPacks::of(job);
  const int Dp = BackwardScratch::padded_dim(job), tq = f.tile_q;
  const std::int64_t q_items = f.batch * f.heads * packs.q_tiles;
  if (item < q_items) {
    const std::int64_t bh = item / packs.q_tiles, qi = item % packs.q_tiles;
    const QTile t = q_tile<DT>(job, bh / f.heads, bh % f.heads, qi);
    load_q_rows<DT>(job, w, t);
    pack_b_pairs(w.qt, tq, Dp, t.lanes, packs.q(job, t.b, t.h, qi, 0));
    pack_b_pairs(w.dot, tq, Dp, t.lanes, packs.q(job, t.b, t.h, qi, 1));
    pack_b_pairs(w.q, Dp, t.lanes, Dp, packs.q(job, t.b, t.h, qi, 2));
    pack_b_pairs(w.dout, Dp, t.lanes, Dp, packs.q(job, t.b, t.h, qi, 3));
    return;
  }
  item -= q_items;
  const std::int64_t kv_heads = f.heads / f.kv_group, bhk = item / packs.kv_tiles, kt = item % packs.kv_tiles;
  const std::int64_t b = bhk / kv_heads, hk = bhk % kv_heads, j0 = kt * f.tile_kv;
  const int cols = static_cast<int>(f.seq_kv - j0 < f.tile_kv ? f.seq_kv - j0 : f.tile_kv);
  const int keys = round_up_to(cols, kPairReduceStep);  // rows past the keys: zero (the products' steps)
  load_kv_rows<DT>(job, w, b, hk, j0, cols, keys);
  pack_a_rows(w.k, Dp, cols, keys, Dp, packs.kv(job, b, hk, kt, 0), Dp / 2);
  pack_a_rows(w.v, Dp, cols, keys, Dp, packs.kv(job, b, hk, kt, 1), Dp / 2);
  pack_a_transposed(w.k, Dp, keys, Dp, packs.kv(job, b, hk, kt, 2), f.tile_kv / 2);
}
#endif

// The products' unit held for an item: the tile unit configured and then
// released around an item of pair products on the amx path; nothing
// elsewhere.
template <DType DT>
struct ProductUnit {
#if defined(FA_BACKWARD_PAIRS)
  ProductUnit() {
    if constexpr (kPairProducts<DT>) unit.emplace();
  }
  std::optional<PairUnit> unit;
#endif
};

template <DType DT>
inline void run_backward_typed(const BackwardJob& job) {
  const detail::AttentionJob& f = job.fwd;
  detail::ThreadPool& pool = detail::ThreadPool::global();
  const ModifierJobs mods(f);
  auto scratch = [&](int worker) {
    return BackwardScratch::carve(job, job.scratch + static_cast<std::size_t>(worker) * job.per_thread_floats);
  };
  const std::int64_t bh_count = f.batch * f.heads;
  pool.parallel_for(bh_count, f.threads, [&](std::int64_t bh, int) { delta_item<DT>(job, bh); });
#if defined(FA_BACKWARD_PAIRS)
  if constexpr (kPairProducts<DT>) {
    const PairPacks packs = PairPacks::of(job);
    const std::int64_t items = f.batch * (f.heads * packs.q_tiles + f.heads / f.kv_group * packs.kv_tiles);
    pool.parallel_for(items, f.threads, [&](std::int64_t item, int worker) { pack_item<DT>(job, scratch(worker), item); });
  }
#endif

  const std::int64_t kv_tiles = (f.seq_kv + f.tile_kv - 1) / f.tile_kv, kv_heads = f.heads / f.kv_group;
  if (job.whole_heads) {
    pool.parallel_for(f.batch * kv_heads, f.threads, [&](std::int64_t item, int worker) {
      [[maybe_unused]] const ProductUnit<DT> unit;
      whole_head_item<DT>(job, mods, scratch(worker), item / kv_heads, item % kv_heads);
    });
    return;
  }
  pool.parallel_for(f.batch * kv_heads * kv_tiles, f.threads, [&](std::int64_t item, int worker) {
    [[maybe_unused]] const ProductUnit<DT> unit;
    const std::int64_t kt = item % kv_tiles, bhk = item / kv_tiles;
    dkdv_item<DT>(job, mods, scratch(worker), bhk / kv_heads, bhk % kv_heads, kt);
  });

  const std::int64_t q_tiles = (f.seq_q + f.tile_q - 1) / f.tile_q;
  if (!job.dbias) {
    pool.parallel_for(bh_count * q_tiles, f.threads, [&](std::int64_t item, int worker) {
      [[maybe_unused]] const ProductUnit<DT> unit;
      const std::int64_t bh = item / q_tiles;
      dq_tile<DT>(job, mods, scratch(worker), bh / f.heads, bh % f.heads, item % q_tiles);
    });
    return;
  }
  // With dbias, an item owns its bias head's rows of one Q tile: it clears
  // them, then adds every (batch, head) that reads them, in a fixed order.
  pool.parallel_for(job.bias_heads * q_tiles, f.threads, [&](std::int64_t item, int worker) {
    [[maybe_unused]] const ProductUnit<DT> unit;
    const std::int64_t hb = item / q_tiles, qi = item % q_tiles;
    const std::int64_t i0 = qi * f.tile_q, rows = f.seq_q - i0 < f.tile_q ? f.seq_q - i0 : f.tile_q;
    std::memset(job.dbias + (hb * f.seq_q + i0) * f.seq_kv, 0, sizeof(float) * rows * f.seq_kv);
    const BackwardScratch w = scratch(worker);
    for (std::int64_t b = 0; b < f.batch; ++b) {
      for (std::int64_t h = 0; h < f.heads; ++h) {
        if (job.bias_heads == 1 || h == hb) dq_tile<DT>(job, mods, w, b, h, qi);
      }
    }
  });
}

inline void run_backward(const BackwardJob& job) {
  switch (job.fwd.dtype) {
    case DType::kF16: run_backward_typed<DType::kF16>(job); break;
    case DType::kBF16: run_backward_typed<DType::kBF16>(job); break;
    default: run_backward_typed<DType::kF32>(job); break;
  }
}

inline constexpr detail::BackwardKernelTable backward_table_of(Isa isa, const char* name) {
  return {isa, name, &backward_workspace_floats, &backward_pair_pack_u32, &run_backward};
}

}  // namespace fa::FA_KERNEL_NS
