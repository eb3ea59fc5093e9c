// FlashAttention-2 forward on the CPU.
//
// Loop order (the FA2 one): each work item is one (batch, head, Q tile); its
// tile_q query rows stay in the thread's buffers while the loop walks over the
// K/V tiles, folding each block of scores into a running row maximum and row
// sum (online softmax) and rescaling the output accumulator only when the
// maximum moves.  The output is normalized once, after the last K/V tile.
// Scratch memory per thread is a handful of tiles: O(tile), never
// seq_q x seq_kv.
//
// This is the portable path: plain C++ loops the compiler vectorizes for the
// baseline x86-64 target.  Options (dtype, prefetch) become template
// parameters once, in fa2_forward; the tile loops test none of them.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>

#include "flash_attention/flash_attention.h"
#include "../common/mask.h"
#include "../common/online_softmax.h"
#include "../common/thread_pool.h"
#include "../common/tile_config.h"
#include "../common/tile_io.h"

namespace fa {
namespace {

using detail::kNegInf;

// Per-thread scratch, carved from one allocation made before the parallel loop.
struct Workspace {
  float* q;      // [tile_q][D]     Q rows, pre-multiplied by scale * log2(e)
  float* kt;     // [D][tile_kv]    K tile, transposed
  float* v;      // [tile_kv][D]    V tile
  float* s;      // [tile_q][tile_kv] scores, then probabilities
  float* acc;    // [tile_q][D]     unnormalized output
  float* m;      // [tile_q]        running row maximum (log2 units)
  float* l;      // [tile_q]        running row sum
  float* inv_l;  // [tile_q]        1 / row sum, for the epilogue

  static std::size_t floats(int tq, int tkv, int D) {
    auto pad = [](std::size_t n) { return (n + 15) & ~std::size_t{15}; };  // 64-byte multiples
    return pad(std::size_t(tq) * D) * 2 + pad(std::size_t(D) * tkv) + pad(std::size_t(tkv) * D) +
           pad(std::size_t(tq) * tkv) + pad(tq) * 3;
  }
  static Workspace carve(float* base, int tq, int tkv, int D) {
    auto pad = [](std::size_t n) { return (n + 15) & ~std::size_t{15}; };
    Workspace w;
    float* p = base;
    w.q = p;     p += pad(std::size_t(tq) * D);
    w.kt = p;    p += pad(std::size_t(D) * tkv);
    w.v = p;     p += pad(std::size_t(tkv) * D);
    w.s = p;     p += pad(std::size_t(tq) * tkv);
    w.acc = p;   p += pad(std::size_t(tq) * D);
    w.m = p;     p += pad(tq);
    w.l = p;     p += pad(tq);
    w.inv_l = p;
    return w;
  }
};

struct Plan {
  int tile_q, tile_kv, threads;
  std::int64_t q_tiles;
};

Plan make_plan(const AttentionParams& p) {
  Plan plan;
  plan.tile_q = p.tile_q > 0 ? p.tile_q : detail::kDefaultTileQ;
  plan.tile_kv = p.tile_kv > 0 ? p.tile_kv : detail::kDefaultTileKv;
  plan.threads = p.threads > 0 ? p.threads : default_thread_count();
  plan.q_tiles = (p.seq_q + plan.tile_q - 1) / plan.tile_q;
  return plan;
}

// S[r][c] = sum_d Q[r][d] * Kt[d][c] for r < rows, c < cols.
void scores_tile(const float* q, const float* kt, int rows, int cols, int D, int ld, float* s) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) {  // four rows share each load of Kt
    float* s0 = s + r * ld;
    float* s1 = s0 + ld;
    float* s2 = s1 + ld;
    float* s3 = s2 + ld;
    const float* q0 = q + r * D;
    for (int c = 0; c < cols; ++c) s0[c] = s1[c] = s2[c] = s3[c] = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float a0 = q0[d], a1 = q0[D + d], a2 = q0[2 * D + d], a3 = q0[3 * D + d];
      const float* k = kt + d * ld;
      for (int c = 0; c < cols; ++c) {
        s0[c] += a0 * k[c];
        s1[c] += a1 * k[c];
        s2[c] += a2 * k[c];
        s3[c] += a3 * k[c];
      }
    }
  }
  for (; r < rows; ++r) {
    float* s0 = s + r * ld;
    const float* q0 = q + r * D;
    for (int c = 0; c < cols; ++c) s0[c] = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float a0 = q0[d];
      const float* k = kt + d * ld;
      for (int c = 0; c < cols; ++c) s0[c] += a0 * k[c];
    }
  }
}

// acc[r][:] = acc[r][:] * alpha + sum_c P[r][c] * V[c][:] for one row.
void accumulate_row(float* acc, float alpha, const float* prob, const float* v, int cols, int D) {
  if (alpha != 1.0f) {
    for (int d = 0; d < D; ++d) acc[d] *= alpha;
  }
  for (int c = 0; c < cols; ++c) {
    const float pc = prob[c];
    if (pc == 0.0f) continue;  // masked or underflowed: skip the row of V
    const float* vr = v + c * D;
    for (int d = 0; d < D; ++d) acc[d] += pc * vr[d];
  }
}

template <DType DT, bool kPrefetch>
void run_item(const AttentionParams& p, const AttentionTensors& t, const Plan& plan,
              std::int64_t item, Workspace w) {
  const std::int64_t BH = p.batch * p.num_heads;
  // Items run from the last Q tile to the first: under a causal mask the last
  // tiles see the most keys, and handing out the longest work first balances
  // the threads.
  const std::int64_t qt = plan.q_tiles - 1 - item / BH;
  const std::int64_t bh = item % BH;
  const std::int64_t b = bh / p.num_heads, h = bh % p.num_heads;
  const std::int64_t hk = h / (p.num_heads / p.kv_heads());
  const int D = static_cast<int>(p.head_dim);
  const int tkv = plan.tile_kv;
  const std::int64_t i0 = qt * plan.tile_q;
  const int rows = static_cast<int>(std::min<std::int64_t>(plan.tile_q, p.seq_q - i0));
  const std::int64_t kv_end = detail::key_end_for_rows(p, i0 + rows);
  const std::size_t esize = dtype_size(DT);

  const auto* qbase = static_cast<const char*>(t.q.data) + t.q.offset(b, h, i0, 0) * esize;
  const auto* kbase = static_cast<const char*>(t.k.data) + t.k.offset(b, hk, 0, 0) * esize;
  const auto* vbase = static_cast<const char*>(t.v.data) + t.v.offset(b, hk, 0, 0) * esize;
  const std::int64_t ks = t.k.strides[2], vs = t.v.strides[2];

  detail::load_rows<DT>(qbase, t.q.strides[2], rows, D, p.softmax_scale() * detail::kLog2e, w.q);
  std::fill_n(w.acc, std::size_t(rows) * D, 0.0f);
  std::fill_n(w.m, rows, kNegInf);
  std::fill_n(w.l, rows, 0.0f);

  for (std::int64_t j0 = 0; j0 < kv_end; j0 += tkv) {
    const int cols = static_cast<int>(std::min<std::int64_t>(tkv, kv_end - j0));
    if constexpr (kPrefetch) {  // FA_ENABLE_ASYNC: start loading the next K/V tile now
      const std::int64_t j1 = j0 + tkv;
      if (j1 < kv_end) {
        const int next = static_cast<int>(std::min<std::int64_t>(tkv, kv_end - j1));
        detail::prefetch_rows(kbase + j1 * ks * esize, ks * esize, next, D * int(esize));
        detail::prefetch_rows(vbase + j1 * vs * esize, vs * esize, next, D * int(esize));
      }
    }
    detail::load_rows_transposed<DT>(kbase + j0 * ks * esize, ks, cols, D, tkv, w.kt);
    detail::load_rows<DT>(vbase + j0 * vs * esize, vs, cols, D, 1.0f, w.v);
    scores_tile(w.q, w.kt, rows, cols, D, tkv, w.s);

    // Masking: only tiles that cross the causal diagonal, or any tile when an
    // explicit mask is given, pay for it.
    const bool causal_edge = p.causal && j0 + cols > detail::causal_key_end(i0, p.seq_q, p.seq_kv);
    for (int r = 0; r < rows; ++r) {
      float* srow = w.s + r * tkv;
      if (causal_edge) {
        const std::int64_t end = detail::causal_key_end(i0 + r, p.seq_q, p.seq_kv) - j0;
        for (int c = static_cast<int>(std::max<std::int64_t>(end, 0)); c < cols; ++c) srow[c] = kNegInf;
      }
      if (p.mask) {
        const std::int8_t* mrow = p.mask + (i0 + r) * p.seq_kv + j0;
        for (int c = 0; c < cols; ++c) srow[c] = mrow[c] ? srow[c] : kNegInf;
      }
      const float alpha = detail::online_softmax_update(srow, cols, w.m[r], w.l[r]);
      accumulate_row(w.acc + r * D, alpha, srow, w.v, cols, D);
    }
  }

  // Epilogue: normalize once; a row that attended nothing outputs zeros.
  for (int r = 0; r < rows; ++r) w.inv_l[r] = w.l[r] > 0.0f ? 1.0f / w.l[r] : 0.0f;
  auto* obase = static_cast<char*>(t.o.data) + t.o.offset(b, h, i0, 0) * esize;
  detail::store_rows<DT>(w.acc, rows, D, w.inv_l, obase, t.o.strides[2]);
  if (t.lse) {
    float* lse = t.lse + (b * p.num_heads + h) * p.seq_q + i0;
    for (int r = 0; r < rows; ++r) lse[r] = detail::finish_lse(w.m[r], w.l[r]);
  }
}

template <DType DT, bool kPrefetch>
void run_all(const AttentionParams& p, const AttentionTensors& t, const Plan& plan, float* scratch,
             std::size_t per_thread) {
  const std::int64_t items = plan.q_tiles * p.batch * p.num_heads;
  detail::ThreadPool::global().parallel_for(items, plan.threads, [&](std::int64_t item, int worker) {
    Workspace w = Workspace::carve(scratch + per_thread * worker, plan.tile_q, plan.tile_kv,
                                   static_cast<int>(p.head_dim));
    run_item<DT, kPrefetch>(p, t, plan, item, w);
  });
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace

std::size_t fa2_workspace_bytes(const AttentionParams& p, int threads) {
  const Plan plan = make_plan(p);
  const int n = threads > 0 ? threads : plan.threads;
  return Workspace::floats(plan.tile_q, plan.tile_kv, static_cast<int>(p.head_dim)) * sizeof(float) *
         static_cast<std::size_t>(n);
}

Status fa2_forward(const AttentionParams& p, const AttentionTensors& t) {
  if (Status s = validate(p, t); !s.ok()) return s;
  Plan plan = make_plan(p);
  const std::int64_t items = plan.q_tiles * p.batch * p.num_heads;
  plan.threads = static_cast<int>(std::min<std::int64_t>(plan.threads, items));

  const std::size_t per_thread =
      Workspace::floats(plan.tile_q, plan.tile_kv, static_cast<int>(p.head_dim));
  const std::size_t bytes = per_thread * sizeof(float) * static_cast<std::size_t>(plan.threads);
  std::unique_ptr<float, FreeDeleter> scratch(
      static_cast<float*>(std::aligned_alloc(64, (bytes + 63) & ~std::size_t{63})));
  if (!scratch) {
    return Status::OutOfMemory("fa2_forward: could not allocate " + std::to_string(bytes) +
                               " bytes of workspace");
  }

  constexpr bool kAsync = detail::kAsyncPrefetch;
  switch (t.q.dtype) {
    case DType::kF32: run_all<DType::kF32, kAsync>(p, t, plan, scratch.get(), per_thread); break;
    case DType::kF16: run_all<DType::kF16, kAsync>(p, t, plan, scratch.get(), per_thread); break;
    case DType::kBF16: run_all<DType::kBF16, kAsync>(p, t, plan, scratch.get(), per_thread); break;
  }
  return Status::Ok();
}

}  // namespace fa
