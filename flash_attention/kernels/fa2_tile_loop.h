// The FlashAttention-2 tile loop, written once over a vector policy `Vec`
// (vec_sse2.h, vec_avx2.h, vec_avx512.h) and compiled once per instruction
// set, inside that set's namespace fa::FA_KERNEL_NS so no symbol is shared
// between translation units built with different flags.
//
// Work item = (batch, head, Q tile).  The Q tile is kept transposed (Qᵀ,
// [head_dim][tile_q]) so every step vectorizes over query rows:
//   Sᵀ = K · Qᵀ                  [keys][rows]   (microkernel, K in a contiguous tile buffer)
//   row max / exp2 / row sum     vertical over keys: one lane per query row,
//                                no horizontal reductions anywhere
//   Oᵀ = Oᵀ · diag(alpha) + Vᵀ · Pᵀ  [head_dim][rows] (same microkernel)
// and the epilogue transposes Oᵀ back, divides by the row sum and converts.
//
// Requires before inclusion: FA_KERNEL_NS defined, and the namespace's Vec
// (plus convert_f16 / convert_bf16 when FA_HAVE_SIMD_CONVERT).
#pragma once

#include <x86intrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <type_traits>

#include "../common/dtype_convert.h"
#include "../common/thread_pool.h"
#include "kernel_table.h"

namespace fa::FA_KERNEL_NS {

using detail::Fa2Job;
using detail::TileStage;
using detail::kStageQ;
using detail::kStageKv;
using detail::kStageScores;
using detail::kStageSoftmax;
using detail::kStageRescale;
using detail::kStagePv;
using detail::kStageEpilogue;
using detail::kStageCount;

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

// The next K/V tile's cache lines, fetched a few at a time from inside this
// tile's three long phases (Q·Kᵀ, softmax, P·V each issue a third of them,
// a share per block or row step) instead of all at the tile's start: two
// thousand prefetches in a row wait on the core's fill buffers just as the
// loads they replace would, while spread over the compute their latency hides
// behind it.  Into L2 (a tile is larger than L1): K rows first, then V.
// The pair path always streams them; the vector paths' tile loop with
// FA_ENABLE_ASYNC (its two products issue half each); the row path with
// FA_ENABLE_ASYNC issues all of them at once, into L1 (load_kv_tile).
struct KvLineStream {
  const char* base[2] = {nullptr, nullptr};  // K, V
  std::int64_t stride[2] = {0, 0};           // row strides in bytes
  int rows = 0, lines_per_row = 0;
  int part = 2, row = 0, line = 0;           // cursor; part 2 = done

  int total_lines() const { return 2 * rows * lines_per_row; }
  // Lines per step for a phase of `steps` steps that carries 1 / `phases`.
  int per_step(int steps, int phases) const { return (total_lines() + phases * steps - 1) / (phases * steps); }
  int third_per_step(int steps) const { return per_step(steps, 3); }
  template <int kLocality = 2>
  void issue(int n) {
    for (; n > 0 && part < 2; --n) {
      __builtin_prefetch(base[part] + row * stride[part] + line * 64, 0, kLocality);
      if (++line == lines_per_row) {
        line = 0;
        if (++row == rows) {
          row = 0;
          ++part;
        }
      }
    }
  }
};

// Keys [begin, end) of a K/V tile (relative to its first key) that one
// vector of query rows may attend (tile_key_spans).
struct KeySpan {
  int begin, end;
};
inline constexpr int kMaxRowVectors = 512 / Vec::W;  // tile_q <= 512

// C[i][j] for i < M and j < NV vectors starting at column block j0:
//   C = (kAccumulate ? C * col_scale : 0) + sum_k A(i, k) * B[k][j]
// A(i, k) = a[i * a_rs + k * a_ks]; B and C row-major with ldb / ldc.
// R x NV accumulators stay in registers for the whole k loop.
template <int R, int NV, bool kAccumulate>
inline void gemm_block(const float* a, std::int64_t a_rs, std::int64_t a_ks, const float* b, int ldb, float* c,
                       int ldc, int K, const float* col_scale) {
  using T = typename Vec::T;
  constexpr int W = Vec::W;
  T acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = kAccumulate ? Vec::mul(Vec::load(c + r * ldc + v * W), Vec::load(col_scale + v * W)) : Vec::zero();
    }
  }
  for (int k = 0; k < K; ++k) {
    T bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Vec::load(b + std::int64_t(k) * ldb + v * W);
    const float* ak = a + k * a_ks;
    for (int r = 0; r < R; ++r) {
      const T av = Vec::set1(ak[r * a_rs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = Vec::fmadd(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < NV; ++v) Vec::store(c + r * ldc + v * W, acc[r][v]);
  }
}

// Rows in blocks of R, then the remainder in blocks of 4, 2 and 1.
template <int NV, bool kAccumulate>
inline void gemm_column_block(const float* a, std::int64_t a_rs, std::int64_t a_ks, int M, const float* b, int ldb,
                              float* c, int ldc, int K, const float* col_scale) {
  constexpr int R = Vec::kRows;
  int i = 0;
  for (; i + R <= M; i += R) gemm_block<R, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
  if constexpr (R > 4) {
    if (i + 4 <= M) {
      gemm_block<4, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
      i += 4;
    }
  }
  if constexpr (R > 2) {
    if (i + 2 <= M) {
      gemm_block<2, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
      i += 2;
    }
  }
  if (i < M) gemm_block<1, NV, kAccumulate>(a + i * a_rs, a_rs, a_ks, b, ldb, c + i * ldc, ldc, K, col_scale);
}

// C[M][nvec * W] (+)= A[M][K] · B[K][nvec * W], blocked over columns.
// `spans` (may be null) limits each column block to the keys its rows may
// attend (the union over its vectors: windows only move forward): with
// kKeysAreRows (Q·Kᵀ, A rows are keys) the other rows are not computed (left
// for mask_tile, which runs on every tile with spans, to set to -inf); else
// (P·V, the reduction runs over keys) the reduction skips them, their
// probabilities being 0.
template <bool kAccumulate, bool kKeysAreRows = !kAccumulate>
inline void gemm(const float* a, std::int64_t a_rs, std::int64_t a_ks, int M, int K, const float* b, int ldb,
                 int nvec, float* c, int ldc, const float* col_scale, const KeySpan* spans = nullptr,
                 KvLineStream* next = nullptr) {
  constexpr int W = Vec::W, NV = Vec::kVecs;
  // `next`: half of the next K/V tile's lines, a share after each column block.
  const int share = next ? next->per_step(nvec / NV + nvec % NV, 2) : 0;
  for (int j = 0; j < nvec;) {
    const int nv = nvec - j >= NV ? NV : 1;
    int m0 = 0, m1 = M, k0 = 0, k1 = K;
    if (spans) {
      const int begin = spans[j].begin, end = spans[j + nv - 1].end > begin ? spans[j + nv - 1].end : begin;
      if constexpr (kKeysAreRows) {
        m0 = begin;
        m1 = end;
      } else {
        k0 = begin;
        k1 = end;
      }
    }
    const float* a_sub = a + m0 * a_rs + k0 * a_ks;
    const float* b_sub = b + std::int64_t(k0) * ldb + j * W;
    float* c_sub = c + std::int64_t(m0) * ldc + j * W;
    const float* scale = kAccumulate ? col_scale + j * W : nullptr;
    if (nv == NV) {
      gemm_column_block<NV, kAccumulate>(a_sub, a_rs, a_ks, m1 - m0, b_sub, ldb, c_sub, ldc, k1 - k0, scale);
    } else {
      gemm_column_block<1, kAccumulate>(a_sub, a_rs, a_ks, m1 - m0, b_sub, ldb, c_sub, ldc, k1 - k0, scale);
    }
    if (next) next->issue(share);
    j += nv;
  }
}

// Rows [0, rows) of a tile in the caller's dtype to fp32 [rows][D].
template <DType DT>
inline void load_tile(const void* src, std::int64_t row_stride, int rows, int D, float* dst) {
  for (int r = 0; r < rows; ++r) {
    float* out = dst + std::int64_t(r) * D;
    if constexpr (DT == DType::kF32) {
      std::memcpy(out, static_cast<const float*>(src) + r * row_stride, sizeof(float) * D);
    } else {
      const auto* in = static_cast<const std::uint16_t*>(src) + r * row_stride;
#if defined(FA_HAVE_SIMD_CONVERT)
      if constexpr (DT == DType::kF16) convert_f16(in, out, D); else convert_bf16(in, out, D);
#else
      for (int d = 0; d < D; ++d) out[d] = DT == DType::kF16 ? detail::f16_to_f32(in[d]) : detail::bf16_to_f32(in[d]);
#endif
    }
  }
}

template <DType DT>
inline float load_scalar(const void* base, std::int64_t i) {
  if constexpr (DT == DType::kF32) return static_cast<const float*>(base)[i];
  else if constexpr (DT == DType::kF16) return detail::f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  else return detail::bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
}

template <DType DT>
inline void store_scalar(void* base, std::int64_t i, float x) {
  if constexpr (DT == DType::kF32) static_cast<float*>(base)[i] = x;
  else if constexpr (DT == DType::kF16) static_cast<std::uint16_t*>(base)[i] = detail::f32_to_f16(x);
  else static_cast<std::uint16_t*>(base)[i] = detail::f32_to_bf16(x);
}

inline std::int64_t key_begin(const Fa2Job& job, std::int64_t i) { return detail::window_begin(job.window, i, job.seq_kv); }
inline std::int64_t key_end(const Fa2Job& job, std::int64_t i) { return detail::window_end(job.window, i, job.seq_kv); }

// Keys outside row i's window become -inf in the scores (Sᵀ[c][r] with
// stride `stride` between keys), for the keys [j0, j0 + cols) of a tile.
inline void mask_window(const Fa2Job& job, std::int64_t i, std::int64_t j0, int cols, float* s, std::int64_t stride) {
  const std::int64_t begin = key_begin(job, i) - j0, end = key_end(job, i) - j0;
  for (int c = 0; c < cols && c < begin; ++c) s[c * stride] = kNegInf;
  for (int c = end < 0 ? 0 : static_cast<int>(end); c < cols; ++c) s[c * stride] = kNegInf;
}

// Runs `body` (`inner` times per clock check) for about `seconds`; returns
// the calls per second.  The loop of the peak probes (FMA here, AMX in
// amx_tile_path.h).
template <class Body>
inline double calls_per_second(double seconds, long inner, Body&& body) {
  long calls = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double elapsed = 0.0;
  do {
    for (long k = 0; k < inner; ++k) body();
    calls += inner;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    elapsed = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
  } while (elapsed < seconds);
  return double(calls) / elapsed;
}

// Online softmax over one Sᵀ tile [cols][tq], one vector lane per query row:
// Sᵀ becomes Pᵀ = exp2(S * scale - new max), the running max and sum move,
// and alpha receives each row's rescale factor for the output accumulator.
// The scale (> 0, so the block max scales with the scores) is one fused
// multiply-add per score rather than a separate pass over the tile.
inline void online_softmax_tile(const Workspace& w, int cols, int nvec, int tq, float scale) {
  using T = typename Vec::T;
  constexpr int W = Vec::W;
  const T vscale = Vec::set1(scale);
  for (int j = 0; j < nvec; ++j) {
    float* col = w.st + j * W;
    T block_max = Vec::set1(kNegInf);
    for (int c = 0; c < cols; ++c) block_max = Vec::max(block_max, Vec::load(col + std::int64_t(c) * tq));
    block_max = Vec::mul(block_max, vscale);
    const T m_old = Vec::load(w.m + j * W);
    const T m_new = Vec::max(m_old, block_max);
    // A row that has seen no attendable key keeps max -inf; subtracting 0
    // instead makes its probabilities exp2(-inf) = 0 and its alpha 0.
    const T m_sub = Vec::zero_if_neg_inf(m_new);
    const T neg_m_sub = Vec::sub(Vec::zero(), m_sub);
    T sum = Vec::zero();
    for (int c = 0; c < cols; ++c) {
      const T s = Vec::load(col + std::int64_t(c) * tq);
      const T p = Vec::exp2(Vec::fmadd(s, vscale, neg_m_sub));
      Vec::store(col + std::int64_t(c) * tq, p);
      sum = Vec::add(sum, p);
    }
    const T alpha = Vec::exp2(Vec::sub(m_old, m_sub));
    Vec::store(w.alpha + j * W, alpha);
    Vec::store(w.l + j * W, Vec::fmadd(Vec::load(w.l + j * W), alpha, sum));
    Vec::store(w.m + j * W, m_new);
  }
}

// One K/V tile as fp32 rows: widened into the thread's buffers for 16-bit
// inputs; for fp32 inputs copied there too on the tile path (kContiguous:
// the microkernels then read rows D floats apart instead of a whole token
// apart, measured 5-7% faster at B1 S4096 H8 D128, docs/PERF.md) and read
// in place on the row path (decoding reads each element once, so a copy
// would only add a pass).  kPrefetch (FA_ENABLE_ASYNC on the row path): the
// next tile's rows are prefetched first, all at once, so their loads
// overlap this tile's work (the tile path streams them instead).
struct KvTile {
  const float* k;
  const float* v;
  std::int64_t ldk, ldv;
};

template <DType DT>
inline KvLineStream next_kv_tile_lines(const Fa2Job& job, const char* kbase, const char* vbase, std::int64_t j0,
                                       std::int64_t kv_end) {
  KvLineStream s;
  const std::int64_t j1 = j0 + job.tile_kv;
  if (j1 >= kv_end) return s;
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(DT));
  s.base[0] = kbase + j1 * job.k_strides[2] * es;
  s.base[1] = vbase + j1 * job.v_strides[2] * es;
  s.stride[0] = job.k_strides[2] * es;
  s.stride[1] = job.v_strides[2] * es;
  s.rows = static_cast<int>(kv_end - j1 < job.tile_kv ? kv_end - j1 : job.tile_kv);
  s.lines_per_row = static_cast<int>((job.head_dim * es + 63) / 64);
  s.part = 0;
  return s;
}

template <DType DT, bool kPrefetch, bool kContiguous = false>
inline KvTile load_kv_tile(const Fa2Job& job, const Workspace& w, const char* kbase, const char* vbase, std::int64_t j0,
                           int cols, std::int64_t kv_end) {
  const int D = static_cast<int>(job.head_dim);
  const std::size_t es = dtype_size(DT);
  const std::int64_t ks = job.k_strides[2], vs = job.v_strides[2];
  if constexpr (kPrefetch) {  // FA_ENABLE_ASYNC: the next tile's rows, all at once
    KvLineStream next = next_kv_tile_lines<DT>(job, kbase, vbase, j0, kv_end);
    next.issue<3>(next.total_lines());
  }
  if constexpr (DT == DType::kF32 && !kContiguous) {
    return {reinterpret_cast<const float*>(kbase) + j0 * ks, reinterpret_cast<const float*>(vbase) + j0 * vs, ks, vs};
  } else {
    load_tile<DT>(kbase + j0 * ks * es, ks, cols, D, w.kbuf);
    load_tile<DT>(vbase + j0 * vs * es, vs, cols, D, w.vbuf);
    return {w.kbuf, w.vbuf, D, D};
  }
}

// tanh on the vector unit: (1 - e) / (1 + e) with e = exp(-2|x|) <= 1, so
// the softmax's exp2 serves (absolute error ~1e-7).
inline typename Vec::T tanh_vec(typename Vec::T x) {
  const typename Vec::T e = Vec::exp2(Vec::mul(Vec::abs(x), Vec::set1(-2.8853900817779268f)));  // -2 log2(e)
  const typename Vec::T one = Vec::set1(1.0f);
  return Vec::copysign(Vec::div(Vec::sub(one, e), Vec::add(one, e)), x);
}

// A row's online-softmax state before its first key: max -inf and sum 0, or,
// with an attention sink, the sink as the max and exp(0) = 1 as the sum.
// The sink joins once per row, in the first K/V chunk.
inline float initial_row_max(const Fa2Job& job, std::int64_t h, std::int64_t split) {
  return job.sinks && split == 0 ? job.sinks[h] * 1.4426950408889634f : kNegInf;
}
inline float initial_row_sum(const Fa2Job& job, std::int64_t split) { return job.sinks && split == 0 ? 1.0f : 0.0f; }

inline bool has_score_modifiers(const Fa2Job& job) {
  return job.softcap_log2 > 0.0f || job.alibi_slopes || job.bias;
}

// Applies softcap, ALiBi and bias (in that order) to scores of rows
// [i0, i0 + rows) and keys [j0, j0 + cols): s[c * key_stride + r * row_stride].
// Scores are in log2 units (scaled by scale * log2(e)), so every modifier is too.
inline void modify_scores(const Fa2Job& job, std::int64_t h, std::int64_t i0, int rows, std::int64_t j0, int cols,
                          float* s, std::int64_t key_stride, std::int64_t row_stride) {
  constexpr float kLog2e = 1.4426950408889634f;
  if (job.softcap_log2 > 0.0f) {
    // Vectorized along whichever of keys and rows is contiguous.
    const typename Vec::T cap = Vec::set1(job.softcap_log2), inv = Vec::set1(1.0f / job.softcap_log2);
    const bool rows_contiguous = row_stride == 1;
    const int outer = rows_contiguous ? cols : rows, inner = rows_contiguous ? rows : cols;
    const std::int64_t outer_stride = rows_contiguous ? key_stride : row_stride;
    for (int a = 0; a < outer; ++a) {
      float* line = s + a * outer_stride;
      int b = 0;
      for (; b + Vec::W <= inner; b += Vec::W) {
        Vec::store(line + b, Vec::mul(cap, tanh_vec(Vec::mul(Vec::load(line + b), inv))));
      }
      if (b < inner) {
        float buf[Vec::W] = {};
        for (int k = 0; b + k < inner; ++k) buf[k] = line[b + k];
        Vec::store(buf, Vec::mul(cap, tanh_vec(Vec::mul(Vec::load(buf), inv))));
        for (int k = 0; b + k < inner; ++k) line[b + k] = buf[k];
      }
    }
  }
  if (job.alibi_slopes) {
    const float slope = job.alibi_slopes[h] * kLog2e;
    const std::int64_t offset = job.seq_kv - job.seq_q;
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < rows; ++r) {
        const std::int64_t dist = i0 + r + offset - (j0 + c);
        s[c * key_stride + r * row_stride] -= slope * float(dist < 0 ? -dist : dist);
      }
    }
  }
  if (job.bias) {
    const float* bias = job.bias + h * job.bias_head_stride;
    for (int r = 0; r < rows; ++r) {
      const float* brow = bias + (i0 + r) * job.seq_kv + j0;
      for (int c = 0; c < cols; ++c) s[c * key_stride + r * row_stride] += brow[c] * kLog2e;
    }
  }
}

// What a row's output is divided by: its softmax sum, or +inf for a row that
// attended nothing (its accumulator is 0, so it outputs zeros).  A division,
// not a multiplication by the reciprocal: one rounding instead of two.
inline float row_denominator(float l) { return l > 0.0f ? l : __builtin_inff(); }

using detail::kRowPathMaxRows;

// s[c] = exp2(s[c] - sub) for c < n; returns the sum.
inline float exp2_row(float* s, int n, float sub) {
  typename Vec::T total = Vec::zero();
  const typename Vec::T vsub = Vec::set1(sub);
  int c = 0;
  for (; c + Vec::W <= n; c += Vec::W) {
    const typename Vec::T p = Vec::exp2(Vec::sub(Vec::load(s + c), vsub));
    Vec::store(s + c, p);
    total = Vec::add(total, p);
  }
  float sum = Vec::reduce_add(total);
  if (c < n) {
    float buf[Vec::W];
    for (int k = 0; k < Vec::W; ++k) buf[k] = c + k < n ? s[c + k] : kNegInf;
    Vec::store(buf, Vec::exp2(Vec::sub(Vec::load(buf), vsub)));
    for (int k = 0; c + k < n; ++k) {
      s[c + k] = buf[k];
      sum += buf[k];
    }
  }
  return sum;
}

}  // namespace fa::FA_KERNEL_NS

// The fp16-arithmetic softmax of FA_MIXED_PRECISION_SOFTMAX=OFF (amx path).
#if defined(FA_HAVE_AVX512FP16)
#include "half_softmax.h"
#endif

namespace fa::FA_KERNEL_NS {

// Whether fp16 inputs get the fp16-arithmetic softmax: only with
// FA_MIXED_PRECISION_SOFTMAX=OFF, on a path built with AVX512-FP16 (the
// dispatcher refuses fp16 calls of an OFF build on the other paths).
#if defined(FA_HAVE_AVX512FP16) && defined(FA_MIXED_PRECISION_SOFTMAX) && !FA_MIXED_PRECISION_SOFTMAX
template <DType DT>
inline constexpr bool kHalfSoftmax = DT == DType::kF16;
#else
template <DType DT>
inline constexpr bool kHalfSoftmax = false;
#endif

// K and V elements of the row path: fp32 rows, or 16-bit rows widened in
// registers (the avx2 and avx512 paths, which have F16C) — decoding reads
// each K/V element once, so a separate widening pass into a buffer would
// double its memory traffic.
template <DType DT>
using Elem = std::conditional_t<DT == DType::kF32, float, std::uint16_t>;

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
void run_rows(const Fa2Job& job, const Workspace& w, int rows, std::int64_t i0, std::int64_t kv_begin,
              std::int64_t kv_end, const char* qbase, const char* kbase, const char* vbase, std::int64_t b,
              std::int64_t h, std::int64_t split) {
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
    constexpr bool kFused = DT != DType::kF32;
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
#if defined(FA_HAVE_SIMD_CONVERT)
      if constexpr (kFused) {
        for (int c = 0; c < cols; ++c) srow[c] = dot<DT>(qr, k16 + c * job.k_strides[2], D) * job.scale_log2;
      } else
#endif
      {
        for (int c = 0; c < cols; ++c) srow[c] = dot<DType::kF32>(qr, kv.k + c * kv.ldk, D) * job.scale_log2;
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
    const float den = row_denominator(w.l[rr]);
    const float lse = w.l[rr] > 0.0f ? w.m[rr] * kLn2 + std::log(w.l[rr]) : kNegInf;
    if (job.num_splits > 1) {
      float* po = job.partial_o + ((split * BH + bh) * job.seq_q + i) * D;
      for (int d = 0; d < D; ++d) po[d] = o[rr * D + d] / den;
      job.partial_lse[(split * BH + bh) * job.seq_q + i] = lse;
      continue;
    }
    char* orow = static_cast<char*>(job.o) + (b * job.o_strides[0] + head * job.o_strides[1] + i * job.o_strides[2]) * es;
    for (int d = 0; d < D; ++d) store_scalar<DT>(orow, d, o[rr * D + d] / den);
    if (job.lse) job.lse[b * job.lse_strides[0] + head * job.lse_strides[1] + i] = lse;
  }
}

// One (batch, head, Q tile) item on the tile path, whose keys and query rows
// the caller resolved.
struct TileItem {
  std::int64_t b, h, bh, split, i0, kv_begin, kv_end;
  int rows, nvec;  // query rows, and the row vectors in use (rows rounded up to Vec::W)
  const char *qbase, *kbase, *vbase;  // Q at the tile's first row; K and V at the head's first key
};

// The log-sum-exp of a tile's rows (natural log), when asked for.
inline void write_tile_lse(const Fa2Job& job, const Workspace& w, const TileItem& it) {
  if (!job.lse) return;
  float* lse = job.lse + it.b * job.lse_strides[0] + it.h * job.lse_strides[1] + it.i0;
  for (int r = 0; r < it.rows; ++r) lse[r] = w.l[r] > 0.0f ? w.m[r] * kLn2 + std::log(w.l[r]) : kNegInf;
}

// The tile path's epilogue: normalize once (a row that attended nothing
// outputs zeros) and write O and the LSE, or a chunk's fp32 partials.
template <DType DT>
inline void write_tile_outputs(const Fa2Job& job, const Workspace& w, const TileItem& it) {
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, rows = it.rows;
  const std::int64_t b = it.b, h = it.h, split = it.split, i0 = it.i0;
  const std::int64_t BH = job.batch * job.heads, bh = b * job.heads + h;
  const std::size_t es = dtype_size(DT);
  if (job.num_splits > 1) {  // a chunk's normalized fp32 partial, combined later
    for (int r = 0; r < rows; ++r) w.alpha[r] = row_denominator(w.l[r]);
    float* po = job.partial_o + ((split * BH + bh) * job.seq_q + i0) * D;
    for (int r0 = 0; r0 < rows; r0 += 16) {
      const int r1 = r0 + 16 < rows ? r0 + 16 : rows;
      for (int d0 = 0; d0 < D; d0 += 16) {
        const int d1 = d0 + 16 < D ? d0 + 16 : D;
        for (int r = r0; r < r1; ++r) {
          for (int d = d0; d < d1; ++d) po[std::int64_t(r) * D + d] = w.ot[std::int64_t(d) * tq + r] / w.alpha[r];
        }
      }
    }
    float* plse = job.partial_lse + (split * BH + bh) * job.seq_q + i0;
    for (int r = 0; r < rows; ++r) plse[r] = w.l[r] > 0.0f ? w.m[r] * kLn2 + std::log(w.l[r]) : kNegInf;
    return;
  }
  char* obase = static_cast<char*>(job.o) + (b * job.o_strides[0] + h * job.o_strides[1] + i0 * job.o_strides[2]) * es;
  for (int r = 0; r < rows; ++r) w.alpha[r] = row_denominator(w.l[r]);  // alpha is free now
  for (int r0 = 0; r0 < rows; r0 += 16) {
    const int r1 = r0 + 16 < rows ? r0 + 16 : rows;
    for (int d0 = 0; d0 < D; d0 += 16) {
      const int d1 = d0 + 16 < D ? d0 + 16 : D;
      for (int r = r0; r < r1; ++r) {
        const std::int64_t row = r * job.o_strides[2];
        for (int d = d0; d < d1; ++d) store_scalar<DT>(obase, row + d, w.ot[std::int64_t(d) * tq + r] / w.alpha[r]);
      }
    }
  }
  write_tile_lse(job, w, it);
}

// Whether the keys [j0, j0 + cols) cross the window of some row in [i0, i0 +
// rows): the causal diagonal, a band's sides.  Windows move forward with the
// row, so the first row's end and the last row's begin decide.
inline bool tile_crosses_window(const Fa2Job& job, std::int64_t i0, int rows, std::int64_t j0, int cols) {
  return job.window.active && (j0 + cols > key_end(job, i0) || j0 < key_begin(job, i0 + rows - 1));
}

// Masking: only tiles crossing a window edge, or any tile under an explicit
// mask, pay for it.
inline void mask_tile(const Fa2Job& job, std::int64_t i0, int rows, std::int64_t j0, int cols, float* st, int tq) {
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
inline const KeySpan* tile_key_spans(const Fa2Job& job, const TileItem& it, std::int64_t j0, int cols, KeySpan* spans) {
  constexpr int W = Vec::W;
  if (!tile_crosses_window(job, it.i0, it.rows, j0, cols)) return nullptr;
  for (int j = 0; j < it.nvec; ++j) {
    const std::int64_t first = it.i0 + W * j, last = it.i0 + (W * j + W - 1 < it.rows ? W * j + W - 1 : it.rows - 1);
    std::int64_t begin = key_begin(job, first) - j0, end = key_end(job, last) - j0;
    begin = begin < 0 ? 0 : (begin > cols ? cols : begin);
    end = end < begin ? begin : (end > cols ? cols : end);
    spans[j] = {static_cast<int>(begin), static_cast<int>(end)};
  }
  return spans;
}

// Dropout on a Pᵀ tile, after the row sum took the undropped P.
inline void drop_tile(const Fa2Job& job, std::int64_t bh, std::int64_t i0, int rows, std::int64_t j0, int cols,
                      float* st, int tq) {
  for (int c = 0; c < cols; ++c) {
    for (int r = 0; r < rows; ++r) st[std::int64_t(c) * tq + r] *= detail::dropout_factor(job.dropout, bh, i0 + r, j0 + c);
  }
}

// Oᵀ = 0 (unless the caller writes it whole itself) and every row's softmax
// state before its first key.
inline void init_tile_state(const Fa2Job& job, const Workspace& w, const TileItem& it, bool zero_output = true) {
  constexpr int W = Vec::W;
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, nvec = it.nvec;
  const std::int64_t h = it.h, split = it.split;
  for (int d = 0; zero_output && d < D; ++d) {
    for (int j = 0; j < nvec; ++j) Vec::store(w.ot + std::int64_t(d) * tq + j * W, Vec::zero());
  }
  for (int j = 0; j < nvec; ++j) {
    Vec::store(w.m + j * W, Vec::set1(initial_row_max(job, h, split)));
    Vec::store(w.l + j * W, Vec::set1(initial_row_sum(job, split)));
  }
}

// The online softmax of a tile of scores times `scale`: in fp32, or in fp16
// arithmetic where kHalfSoftmax says so.
template <DType DT>
inline void scaled_softmax_tile(const Workspace& w, int cols, int nvec, int tq, float scale) {
#if defined(FA_HAVE_AVX512FP16)
  if constexpr (kHalfSoftmax<DT>) {
    online_softmax_tile_half(w, cols, nvec, tq, scale);
    return;
  }
#endif
  online_softmax_tile(w, cols, nvec, tq, scale);
}

// Score modifiers and masks on a tile of raw scores (Q is not pre-scaled:
// one rounding per score instead of one per Q element and product term).
// Modifiers work in scaled log2 units, so with any of them the tile is
// scaled first.  Returns the scale the softmax still has to apply.
inline float prepare_scores(const Fa2Job& job, const Workspace& w, const TileItem& it, std::int64_t j0, int cols) {
  const int tq = job.tile_q;
  float scale = job.scale_log2;
  if (has_score_modifiers(job)) {
    const typename Vec::T vscale = Vec::set1(scale);
    for (int c = 0; c < cols; ++c) {
      float* srow = w.st + std::int64_t(c) * tq;
      for (int j = 0; j < it.nvec; ++j) Vec::store(srow + j * Vec::W, Vec::mul(Vec::load(srow + j * Vec::W), vscale));
    }
    modify_scores(job, it.h, it.i0, it.rows, j0, cols, w.st, tq, 1);
    scale = 1.0f;
  }
  mask_tile(job, it.i0, it.rows, j0, cols, w.st, tq);
  return scale;
}

// Modifiers, masks, the online softmax and dropout on a tile of raw scores.
template <DType DT>
inline void softmax_raw_tile(const Fa2Job& job, const Workspace& w, const TileItem& it, std::int64_t j0, int cols) {
  const float scale = prepare_scores(job, w, it, j0, cols);
  scaled_softmax_tile<DT>(w, cols, it.nvec, job.tile_q, scale);
  if (job.dropout.active) drop_tile(job, it.bh, it.i0, it.rows, j0, cols, w.st, job.tile_q);
}

// FA_STAGE_TIMING: one item's stage laps (TSC), added to job.stage_cycles
// by finish(); a no-op (no TSC read) when the job is not timed.  (No
// destructor: it would give the kernel files exception-cleanup symbols.)
class StageLaps {
 public:
  explicit StageLaps(std::uint64_t* out) : out_(out), last_(out ? __rdtsc() : 0) {}
  StageLaps(const StageLaps&) = delete;
  StageLaps& operator=(const StageLaps&) = delete;
  // The time since the previous lap goes to `stage`.
  void lap(TileStage stage) {
    if (!out_) return;
    const std::uint64_t now = __rdtsc();
    sum_[stage] += now - last_;
    last_ = now;
  }
  // The last lap goes to `stage`, and the item's sums to the job's counters.
  void finish(TileStage stage) {
    if (!out_) return;
    lap(stage);
    for (int i = 0; i < kStageCount; ++i) __atomic_fetch_add(out_ + i, sum_[i], __ATOMIC_RELAXED);
  }

 private:
  std::uint64_t* out_;
  std::uint64_t last_;
  std::uint64_t sum_[kStageCount] = {};
};

template <DType DT, bool kPrefetch>
void run_tile(const Fa2Job& job, const Workspace& w, const TileItem& it) {
  StageLaps laps(job.stage_cycles);
  constexpr int W = Vec::W;
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, tkv = job.tile_kv;
  const int rows = it.rows, nvec = it.nvec, width = nvec * W;
  const std::int64_t kv_end = it.kv_end;
  const char *qbase = it.qbase, *kbase = it.kbase, *vbase = it.vbase;
  // Qᵀ as given (the softmax applies the scale); unused row lanes are zero.
  // Transposed in 16 x 16 blocks so every cache line written is filled.
  for (int r0 = 0; r0 < width; r0 += 16) {
    for (int d0 = 0; d0 < D; d0 += 16) {
      const int r1 = r0 + 16 < rows ? r0 + 16 : rows, d1 = d0 + 16 < D ? d0 + 16 : D;
      for (int r = r0; r < r1; ++r) {
        for (int d = d0; d < d1; ++d) w.qt[std::int64_t(d) * tq + r] = load_scalar<DT>(qbase, r * job.q_strides[2] + d);
      }
      for (int r = r1 > r0 ? r1 : r0; r < r0 + 16 && r < width; ++r) {
        for (int d = d0; d < d1; ++d) w.qt[std::int64_t(d) * tq + r] = 0.0f;
      }
    }
  }
  init_tile_state(job, w, it);
  laps.lap(kStageQ);

  KeySpan span_buffer[kMaxRowVectors];
  for (std::int64_t j0 = it.kv_begin; j0 < kv_end; j0 += tkv) {
    const int cols = static_cast<int>(kv_end - j0 < tkv ? kv_end - j0 : tkv);
    const KeySpan* spans = tile_key_spans(job, it, j0, cols, span_buffer);
    // FA_ENABLE_ASYNC: the next tile's lines, streamed from inside the products.
    KvLineStream next = kPrefetch ? next_kv_tile_lines<DT>(job, kbase, vbase, j0, kv_end) : KvLineStream{};
    const KvTile kv = load_kv_tile<DT, false, /*kContiguous=*/true>(job, w, kbase, vbase, j0, cols, kv_end);
    laps.lap(kStageKv);

    // Sᵀ[c][r] = K[c] · Qᵀ[:, r], for the keys each row vector may attend
    gemm<false>(kv.k, kv.ldk, 1, cols, D, w.qt, tq, nvec, w.st, tq, nullptr, spans, kPrefetch ? &next : nullptr);
    laps.lap(kStageScores);
    softmax_raw_tile<DT>(job, w, it, j0, cols);
    laps.lap(kStageSoftmax);

    // Oᵀ[d][r] = Oᵀ[d][r] * alpha[r] + sum_c V[c][d] * Pᵀ[c][r] (the rescale is
    // fused into this product here)
    gemm<true>(kv.v, 1, kv.ldv, D, cols, w.st, tq, nvec, w.ot, tq, w.alpha, spans, kPrefetch ? &next : nullptr);
    next.issue(next.total_lines());  // what rounding left (none without FA_ENABLE_ASYNC)
    laps.lap(kStagePv);
  }

  write_tile_outputs<DT>(job, w, it);
  laps.finish(kStageEpilogue);
}

}  // namespace fa::FA_KERNEL_NS

// The pair path (bf16 pair layouts, uses the helpers above) and its engine:
// the AMX tile unit, or AVX512_BF16's dot products.
#if defined(FA_HAVE_AMX) || defined(FA_HAVE_BF16_DOT)
#define FA_HAVE_BF16_PAIRS 1
#include "bf16_pair_path.h"
#endif
#if defined(FA_HAVE_AMX)
#include "amx_tile_path.h"
#elif defined(FA_HAVE_BF16_DOT)
#include "bf16_dot_path.h"
#endif

namespace fa::FA_KERNEL_NS {
#if defined(FA_HAVE_AMX)
using PairEngine = AmxProducts;
#elif defined(FA_HAVE_BF16_DOT)
using PairEngine = DotProducts;
#endif
}  // namespace fa::FA_KERNEL_NS

namespace fa::FA_KERNEL_NS {

template <DType DT, bool kPrefetch>
void run_item(const Fa2Job& job, std::int64_t item, const Workspace& w) {
  constexpr int W = Vec::W;
  // Units: (batch, head), or (batch, K/V head) when GQA heads are packed.
  const std::int64_t heads_per_unit = job.pack_group;
  const std::int64_t unit_heads = job.heads / heads_per_unit;
  const std::int64_t units = job.batch * unit_heads;
  // Last Q tiles first: under a causal mask they see the most keys, and
  // handing out the longest work first balances the threads.  Within a Q
  // tile: chunk (split) by chunk, then unit by unit.
  const std::int64_t qt_index = job.q_tiles - 1 - item / (units * job.num_splits);
  const std::int64_t split = (item / units) % job.num_splits;
  const std::int64_t unit = item % units;
  const std::int64_t b = unit / unit_heads, h = (unit % unit_heads) * heads_per_unit, hk = h / job.kv_group;
  const std::int64_t bh = b * job.heads + h;  // the tile path: one head per unit
  const int tq = job.tile_q, tkv = job.tile_kv;
  const std::int64_t i0 = qt_index * tq;
  const int rows = static_cast<int>(job.seq_q - i0 < tq ? job.seq_q - i0 : tq);
  const int nvec = (rows + W - 1) / W;  // query-row vectors actually in use
  // Keys this item visits: its chunk, cut to the union of its rows' windows
  // (whole tiles before the first row's window start are skipped).
  const std::int64_t chunk_begin = split * job.split_keys;
  const std::int64_t first_key = key_begin(job, i0) / tkv * tkv;
  const std::int64_t kv_begin = first_key > chunk_begin ? first_key : chunk_begin;
  std::int64_t kv_end = key_end(job, i0 + rows - 1);
  if (kv_end > chunk_begin + job.split_keys) kv_end = chunk_begin + job.split_keys;
  const std::size_t es = dtype_size(DT);

  const char* qbase = static_cast<const char*>(job.q) + (b * job.q_strides[0] + h * job.q_strides[1] + i0 * job.q_strides[2]) * es;
  const char* kbase = static_cast<const char*>(job.k) + (b * job.k_strides[0] + hk * job.k_strides[1]) * es;
  const char* vbase = static_cast<const char*>(job.v) + (b * job.v_strides[0] + hk * job.v_strides[1]) * es;

  if (rows <= kRowPathMaxRows || job.pack_group > 1) {
    run_rows<DT, kPrefetch>(job, w, rows, i0, kv_begin, kv_end, qbase, kbase, vbase, b, h, split);
    return;
  }

  const TileItem it{b, h, bh, split, i0, kv_begin, kv_end, rows, nvec, qbase, kbase, vbase};
#if defined(FA_HAVE_BF16_PAIRS)
  if constexpr (PairEngine::template kHandles<DT>) {
    if (pair_tile_path_fits(job)) {
      run_tile_pairs<DT, PairEngine>(job, w, it);
      return;
    }
  }
#endif
  run_tile<DT, kPrefetch>(job, w, it);
}

inline std::int64_t job_items(const Fa2Job& job) {
  return job.q_tiles * job.batch * (job.heads / job.pack_group) * job.num_splits;
}

template <DType DT, bool kPrefetch>
void run_all(const Fa2Job* jobs, const std::int64_t* ends, std::size_t count) {
  const Fa2Job& first = jobs[0];
  if (count == 1) {
    detail::ThreadPool::global().parallel_for(job_items(first), first.threads, [&first](std::int64_t item, int worker) {
      const Workspace w = Workspace::carve(first.scratch + first.per_thread_floats * worker, first.tile_q,
                                           first.tile_kv, static_cast<int>(first.head_dim));
      run_item<DT, kPrefetch>(first, item, w);
    });
    return;
  }
  // Several jobs (variable-length sequences): one item space, the job found
  // by binary search over the running item counts `ends` (computed by the
  // caller: no container code in a file built with wide-vector flags).
  detail::ThreadPool::global().parallel_for(ends[count - 1], first.threads, [&](std::int64_t item, int worker) {
    std::size_t lo = 0, hi = count - 1;
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (ends[mid] > item) hi = mid; else lo = mid + 1;
    }
    const Fa2Job& job = jobs[lo];
    const Workspace w = Workspace::carve(job.scratch + job.per_thread_floats * worker, job.tile_q, job.tile_kv,
                                         static_cast<int>(job.head_dim));
    run_item<DT, kPrefetch>(job, item - (lo == 0 ? 0 : ends[lo - 1]), w);
  });
}

template <bool kPrefetch>
void fa2_run_impl(const Fa2Job* jobs, const std::int64_t* ends, std::size_t count) {
  switch (jobs[0].dtype) {
    case DType::kF32: run_all<DType::kF32, kPrefetch>(jobs, ends, count); break;
    case DType::kF16: run_all<DType::kF16, kPrefetch>(jobs, ends, count); break;
    case DType::kBF16: run_all<DType::kBF16, kPrefetch>(jobs, ends, count); break;
  }
}

inline std::size_t fa2_workspace_floats(int tq, int tkv, int D) { return Workspace::floats(tq, tkv, D); }

inline void exp2_array(const float* in, float* out, int n) {
  int i = 0;
  for (; i + Vec::W <= n; i += Vec::W) Vec::store(out + i, Vec::exp2(Vec::load(in + i)));
  if (i < n) {
    float buf[Vec::W] = {};
    for (int k = 0; k < n - i; ++k) buf[k] = in[i + k];
    Vec::store(buf, Vec::exp2(Vec::load(buf)));
    for (int k = 0; k < n - i; ++k) out[i + k] = buf[k];
  }
}

// Independent FMA chains (more than the FMA latency x pipes) on registers:
// the vector unit's peak on this thread.
// noinline: compiled on its own, so the chains stay in registers whatever the caller.
[[gnu::noinline]] inline double fma_peak_one_thread(double seconds) {
  using T = typename Vec::T;
  constexpr int kChains = 12;  // > FMA latency x pipes, and fits 16 registers with the two constants
  T acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Vec::set1(1.0f + i * 1e-3f);
  const T mul = Vec::set1(0.999999f), add = Vec::set1(1e-7f);
  const double rate = calls_per_second(seconds, 4096, [&] {
    for (int i = 0; i < kChains; ++i) acc[i] = Vec::fmadd(acc[i], mul, add);
  });
  float sink[Vec::W];
  T total = acc[0];
  for (int i = 1; i < kChains; ++i) total = Vec::add(total, acc[i]);
  Vec::store(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return 2.0 * Vec::W * kChains * rate / 1e9;
}

}  // namespace fa::FA_KERNEL_NS
