// K/V (and Q) tiles from the caller's tensors: loading in the caller's
// dtype, widening to fp32, the contiguous tile buffers, and the next tile's
// cache lines streamed into L2 (KvLineStream, in kv_line_stream.h).
#pragma once

#include <cstring>

#include "../common/dtype_convert.h"
#include "kv_line_stream.h"
#include "tile_state.h"
#if defined(FA_HAVE_SIMD_CONVERT)
#include "fp8_convert.h"
#endif

namespace fa::FA_KERNEL_NS {

// Rows [0, rows) of a tile in the caller's dtype to fp32 [rows][D] (FP8 as
// its values, the descale factors being applied to the scores and outputs).
template <DType DT>
inline void load_tile(const void* src, std::int64_t row_stride, int rows, int D, float* dst) {
  for (int r = 0; r < rows; ++r) {
    float* out = dst + std::int64_t(r) * D;
    if constexpr (DT == DType::kF32) {
      std::memcpy(out, static_cast<const float*>(src) + r * row_stride, sizeof(float) * D);
    } else if constexpr (is_fp8(DT)) {
      const auto* in = static_cast<const std::uint8_t*>(src) + r * row_stride;
#if defined(FA_HAVE_SIMD_CONVERT)
      convert_fp8<DT>(in, out, D);
#else
      for (int d = 0; d < D; ++d) out[d] = DT == DType::kFP8E4M3 ? detail::fp8_e4m3_to_f32(in[d]) : detail::fp8_e5m2_to_f32(in[d]);
#endif
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
  else if constexpr (DT == DType::kBF16) return detail::bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  else if constexpr (DT == DType::kFP8E4M3) return detail::fp8_e4m3_to_f32(static_cast<const std::uint8_t*>(base)[i]);
  else if constexpr (DT == DType::kFP8E5M2) return detail::fp8_e5m2_to_f32(static_cast<const std::uint8_t*>(base)[i]);
  else return static_cast<float>(static_cast<const std::int8_t*>(base)[i]);
}

// Rows [0, rows) of a quantized cache's K or V tile (int8, or FP8 read with
// 16-bit Q: job.kv_dtype) to fp32 [rows][D]: int8 rows times their scale
// (scale[r * scale_stride]), FP8 as their values (the descale factors
// apply to the scores and outputs, as for FP8 inputs).  Not a template: one
// copy per path serves every Q dtype's loops.
inline void load_quantized_tile(DType kv_dtype, const void* src, std::int64_t row_stride, const float* scale,
                                std::int64_t scale_stride, int rows, int D, float* dst) {
  for (int r = 0; r < rows; ++r) {
    float* out = dst + std::int64_t(r) * D;
    const auto* in = static_cast<const std::uint8_t*>(src) + r * row_stride;
    if (kv_dtype == DType::kI8) {
      const float f = scale[r * scale_stride];
      int d = 0;
#if defined(FA_HAVE_SIMD_CONVERT)
      for (; d + Vec::W <= D; d += Vec::W) {
        Vec::store(out + d, Vec::mul(i8_vec_to_f32(reinterpret_cast<const std::int8_t*>(in) + d), Vec::set1(f)));
      }
#endif
      for (; d < D; ++d) out[d] = static_cast<float>(static_cast<std::int8_t>(in[d])) * f;
      continue;
    }
#if defined(FA_HAVE_SIMD_CONVERT)
    if (kv_dtype == DType::kFP8E4M3) convert_fp8<DType::kFP8E4M3>(in, out, D); else convert_fp8<DType::kFP8E5M2>(in, out, D);
#else
    for (int d = 0; d < D; ++d) out[d] = kv_dtype == DType::kFP8E4M3 ? detail::fp8_e4m3_to_f32(in[d]) : detail::fp8_e5m2_to_f32(in[d]);
#endif
  }
}

// Runs fn.template operator()<ODT>() with the job's output dtype as ODT:
// DT itself, or for FP8 inputs the fp32, fp16 or bf16 the call asked for.
template <DType DT, class Fn>
inline void with_output_dtype(const AttentionJob& job, Fn&& fn) {
  if constexpr (is_fp8(DT)) {
    switch (job.o_dtype) {
      case DType::kF16: fn.template operator()<DType::kF16>(); break;
      case DType::kBF16: fn.template operator()<DType::kBF16>(); break;
      default: fn.template operator()<DType::kF32>(); break;
    }
  } else {
    fn.template operator()<DT>();
  }
}

// An output element (fp32, fp16 or bf16: FP8 is never written).
template <DType DT>
inline void store_scalar(void* base, std::int64_t i, float x) {
  static_assert(!is_fp8(DT), "outputs are fp32, fp16 or bf16");
  if constexpr (DT == DType::kF32) static_cast<float*>(base)[i] = x;
  else if constexpr (DT == DType::kF16) static_cast<std::uint16_t*>(base)[i] = detail::f32_to_f16(x);
  else static_cast<std::uint16_t*>(base)[i] = detail::f32_to_bf16(x);
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

// The pool row of K/V row j of batch b (rows from the head's base,
// TileItem::kbase): j itself, or through the block table of a paged cache.
// A tile's rows are consecutive either way (tiles never cross a block),
// but for the amx path's pair tiles at blocks of 16, which take 32 keys
// over two blocks (tile_rows).
inline std::int64_t kv_row(const AttentionJob& job, std::int64_t b, std::int64_t j) {
  if (!job.block_table) return j;
  const std::int64_t block = job.block_table[b * job.blocks_per_seq + (j >> job.block_shift)];
  return (block << job.block_shift) + (j & ((std::int64_t{1} << job.block_shift) - 1));
}

// A tile's K or V rows where they lie: row r at `first` + r x `row_bytes`,
// but from `split` on (a paged cache's tile over two blocks, split a
// multiple of 16) at `second` + (r - split) x `row_bytes`.
struct TileRows {
  const char* first = nullptr;
  const char* second = nullptr;
  int split = 1 << 30;
  std::int64_t row_bytes = 0;
  const char* row(int r) const { return r < split ? first + r * row_bytes : second + (r - split) * row_bytes; }
  bool contiguous() const { return second == nullptr; }
};

// The rows of batch b's tile of `rows` keys from key j, from a head's base
// (TileItem::kbase / vbase) with rows `row_bytes` apart: one run, or two
// where a paged cache's block ends inside the tile (never more than two:
// the planner's tiles).
inline TileRows tile_rows(const AttentionJob& job, const char* base, std::int64_t row_bytes, std::int64_t b,
                          std::int64_t j, int rows) {
  TileRows t{base + kv_row(job, b, j) * row_bytes, nullptr, 1 << 30, row_bytes};
  if (!job.block_table) return t;
  const std::int64_t block = std::int64_t{1} << job.block_shift;
  const std::int64_t in_block = block - (j & (block - 1));
  if (in_block < rows) {
    t.second = base + kv_row(job, b, j + in_block) * row_bytes;
    t.split = static_cast<int>(in_block);
  }
  return t;
}

// The lines of batch b's K/V tile at j1 (empty at kv_end): `heads` K/V
// heads side by side from kbase / vbase (their rows' head_dim x heads
// elements contiguous).  A tile over two blocks streams both; one over
// more (never planned) streams the first two, the rest left to the loads.
inline KvLineStream kv_tile_lines(const AttentionJob& job, const char* kbase, const char* vbase, std::int64_t b,
                                  std::int64_t j1, std::int64_t kv_end, int heads = 1) {
  KvLineStream s;
  if (j1 >= kv_end) return s;
  const std::int64_t es = kv_elem_bytes(job);
  s.rows = static_cast<int>(kv_end - j1 < job.tile_kv ? kv_end - j1 : job.tile_kv);
  s.lines_per_row = static_cast<int>((heads * job.head_dim * es + 63) / 64);
  s.part = 0;
  const TileRows k = tile_rows(job, kbase, job.k_strides[2] * es, b, j1, s.rows);
  const TileRows v = tile_rows(job, vbase, job.v_strides[2] * es, b, j1, s.rows);
  s.base[0] = k.first;
  s.base[1] = v.first;
  s.stride[0] = k.row_bytes;
  s.stride[1] = v.row_bytes;
  if (!k.contiguous()) {
    s.second[0] = k.second;
    s.second[1] = v.second;
    s.split = k.split;
    const int second_rows = 1 << job.block_shift;
    if (s.rows > s.split + second_rows) s.rows = s.split + second_rows;
  }
  return s;
}

// The lines of the tile after the one at j0.
inline KvLineStream next_kv_tile_lines(const AttentionJob& job, const char* kbase, const char* vbase, std::int64_t b,
                                       std::int64_t j0, std::int64_t kv_end, int heads = 1) {
  return kv_tile_lines(job, kbase, vbase, b, j0 + job.tile_kv, kv_end, heads);
}

// A quantized cache (job.kv_dtype differs from DT) is dequantized into the
// buffers (`scales`: an int8 cache's, at the head's first key).
template <DType DT, bool kPrefetch, bool kContiguous = false>
inline KvTile load_kv_tile(const AttentionJob& job, const Workspace& w, const char* kbase, const char* vbase, std::int64_t b,
                           std::int64_t j0, int cols, std::int64_t kv_end, KvScales scales = {}) {
  const int D = static_cast<int>(job.head_dim);
  const std::size_t es = dtype_size(DT);
  const std::int64_t ks = job.k_strides[2], vs = job.v_strides[2], row = kv_row(job, b, j0);
  if constexpr (kPrefetch) {  // FA_ENABLE_ASYNC: the next tile's rows, all at once
    KvLineStream next = next_kv_tile_lines(job, kbase, vbase, b, j0, kv_end);
    next.issue<3>(next.total_lines());
  }
  if (job.kv_dtype != DT) {
    const std::int64_t kss = job.kv_scale_strides[0][2], vss = job.kv_scale_strides[1][2];
    load_quantized_tile(job.kv_dtype, kbase + row * ks, ks, scales.k ? scales.k + row * kss : nullptr, kss, cols, D, w.kbuf);
    load_quantized_tile(job.kv_dtype, vbase + row * vs, vs, scales.v ? scales.v + row * vss : nullptr, vss, cols, D, w.vbuf);
    return {w.kbuf, w.vbuf, D, D};
  }
  if constexpr (DT == DType::kF32 && !kContiguous) {
    return {reinterpret_cast<const float*>(kbase) + row * ks, reinterpret_cast<const float*>(vbase) + row * vs, ks, vs};
  } else {
    load_tile<DT>(kbase + row * ks * es, ks, cols, D, w.kbuf);
    load_tile<DT>(vbase + row * vs * es, vs, cols, D, w.vbuf);
    return {w.kbuf, w.vbuf, D, D};
  }
}


// Element offset of a tile's row r in Q from it.qbase (a packed tile's rows
// come from its heads in turn).
inline std::int64_t q_row_offset(const AttentionJob& job, const TileItem& it, int r) {
  return tile_row_offset(r, it.head_rows, job.q_strides[2], job.q_strides[1]);
}

// Qᵀ [D][tile_q] of an item's rows as given (the softmax applies the scale);
// the lanes from `rows` to the end of the last row vector are zero.
// Transposed in 16 x 16 blocks so every cache line written is filled.
template <DType DT>
inline void load_q_transposed(const AttentionJob& job, const TileItem& it, float* qt) {
  const int D = static_cast<int>(job.head_dim), tq = job.tile_q, rows = it.rows, width = it.nvec * Vec::W;
  for (int r0 = 0; r0 < width; r0 += 16) {
    for (int d0 = 0; d0 < D; d0 += 16) {
      const int r1 = r0 + 16 < rows ? r0 + 16 : rows, d1 = d0 + 16 < D ? d0 + 16 : D;
      for (int r = r0; r < r1; ++r) {
        const std::int64_t row = q_row_offset(job, it, r);
        for (int d = d0; d < d1; ++d) qt[std::int64_t(d) * tq + r] = load_scalar<DT>(it.qbase, row + d);
      }
      for (int r = r1 > r0 ? r1 : r0; r < r0 + 16 && r < width; ++r) {
        for (int d = d0; d < d1; ++d) qt[std::int64_t(d) * tq + r] = 0.0f;
      }
    }
  }
}

}  // namespace fa::FA_KERNEL_NS
