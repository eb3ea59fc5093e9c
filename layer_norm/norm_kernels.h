// The normalization kernels, written once over the attention kernels'
// vector policy (flash_attention/kernels/vec_*.h, `Vec`) and compiled per
// path by kernels/norm_<path>.cpp inside its own FA_KERNEL_NS, templated
// on x's and y's dtypes.  The first pass reads the row (with the residual
// added and rounded to x's dtype, stored as the sum) and takes its sums
// (LayerNorm: deviations from the row's first element and their squares, a
// second pass where that element lies far from the mean; never E[x^2] -
// E[x]^2); the last normalizes and stores y in y's dtype.  The later passes
// read the row again where it lies, x or the sum, from L1 or L2 (an fp32
// scratch copy only where they cannot, see norm_rows_from), so memory sees
// one read of x (and the residual) and one write of y (and the sum).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/dtype_convert.h"
#include "kernels/vec_io.h"
#include "norm_job.h"

namespace fa::FA_KERNEL_NS {

// Sums over the row of d = row[i] - shift and of d^2 (LayerNorm's second
// pass), four vector accumulators a sum, then the tail: the same order for
// every row.
struct RowSums {
  float d = 0, d2 = 0;
};
template <DType ST>
inline RowSums row_sums(const void* row, std::int64_t n, float shift) {
  constexpr int W = Vec::W;
  const typename Vec::T s = Vec::set1(shift);
  typename Vec::T acc[4] = {Vec::zero(), Vec::zero(), Vec::zero(), Vec::zero()};
  typename Vec::T sq[4] = {Vec::zero(), Vec::zero(), Vec::zero(), Vec::zero()};
  std::int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    for (int k = 0; k < 4; ++k) {
      const typename Vec::T v = Vec::sub(load_vec<ST>(row, i + k * W), s);
      acc[k] = Vec::add(acc[k], v);
      sq[k] = Vec::fmadd(v, v, sq[k]);
    }
  }
  for (; i + W <= n; i += W) {
    const typename Vec::T v = Vec::sub(load_vec<ST>(row, i), s);
    acc[0] = Vec::add(acc[0], v);
    sq[0] = Vec::fmadd(v, v, sq[0]);
  }
  RowSums out;
  out.d = Vec::reduce_add(Vec::add(Vec::add(acc[0], acc[1]), Vec::add(acc[2], acc[3])));
  out.d2 = Vec::reduce_add(Vec::add(Vec::add(sq[0], sq[1]), Vec::add(sq[2], sq[3])));
  for (; i < n; ++i) {
    const float v = detail::load_as_f32(row, ST, i) - shift;
    out.d += v;
    out.d2 += v * v;
  }
  return out;
}

// Where the passes after the first read the row (norm_rows_from).
enum class RowCopy {
  kNone,         // where it lies: x, or the sum the fused call stores
  kF32,          // widened into the fp32 scratch
  kStreamedSum,  // the fused call's sum sent out through non-temporal stores,
                 // the row kept in the scratch in x's dtype
};

// Pass A: the row (x, or x plus the residual rounded to x's dtype, stored
// as the sum when asked; kept in `row` as kCopy says), with the sums of
// d = element - shift and of d^2 (kLayerNorm), or of the squares alone
// (RMSNorm's only statistic).
template <bool kLayerNorm, DType XT, RowCopy kCopy>
inline RowSums widen_and_sum(const detail::NormJob& job, std::int64_t r, float* row, float shift) {
  constexpr int W = Vec::W;
  const std::int64_t n = job.hidden, nv = n / W * W;
  const std::size_t xs = detail::norm_elem_bytes(job.x_dtype);
  const void* x = static_cast<const char*>(job.x) + r * job.x_stride * xs;
  const void* res = job.residual ? static_cast<const char*>(job.residual) +
                                       r * job.residual_stride * detail::norm_elem_bytes(job.residual_dtype)
                                 : nullptr;
  void* sum = job.sum ? static_cast<char*>(job.sum) + r * job.sum_stride * xs : nullptr;
  // The next row's x (and residual) lines, one per step of this row's first
  // pass: the row's other passes run from L1, and without them the stream
  // from memory would wait there (LayerNorm bf16 read at half RMSNorm's rate).
  const std::int64_t x_row_bytes = job.x_stride * static_cast<std::int64_t>(xs);
  const std::int64_t res_row_bytes = res ? job.residual_stride * static_cast<std::int64_t>(detail::norm_elem_bytes(job.residual_dtype)) : 0;
  const bool prefetch_next = r + 1 < job.rows;
  auto element = [&](std::int64_t i) {
    if (prefetch_next && (i * static_cast<std::int64_t>(xs)) % 64 < static_cast<std::int64_t>(W * xs)) {
      __builtin_prefetch(static_cast<const char*>(x) + x_row_bytes + i * static_cast<std::int64_t>(xs), 0, 3);
      if (res) __builtin_prefetch(static_cast<const char*>(res) + res_row_bytes + i * static_cast<std::int64_t>(xs), 0, 3);
    }
    typename Vec::T v = load_vec<XT>(x, i);
    if (res) {
      v = round_vec<XT>(Vec::add(v, load_vec(res, job.residual_dtype, i)));
      if (sum) store_vec<XT>(sum, i, v, kCopy == RowCopy::kStreamedSum);
    }
    if constexpr (kCopy == RowCopy::kF32) Vec::store(row + i, v);
    if constexpr (kCopy == RowCopy::kStreamedSum) store_vec<XT>(row, i, v, false);
    return v;
  };
  // Two accumulators a sum in registers (independent chains), the same
  // order for every row.
  const typename Vec::T k = Vec::set1(shift);
  typename Vec::T acc[2] = {Vec::zero(), Vec::zero()}, sq[2] = {Vec::zero(), Vec::zero()};
  auto take = [&](int j, typename Vec::T v) {
    if constexpr (kLayerNorm) {
      v = Vec::sub(v, k);
      acc[j] = Vec::add(acc[j], v);
    }
    sq[j] = Vec::fmadd(v, v, sq[j]);
  };
  std::int64_t i = 0;
  for (; i + 2 * W <= nv; i += 2 * W) {
    const typename Vec::T v0 = element(i), v1 = element(i + W);
    take(0, v0);
    take(1, v1);
  }
  if (i < nv) take(0, element(i));
  RowSums total;
  total.d = Vec::reduce_add(Vec::add(acc[0], acc[1]));
  total.d2 = Vec::reduce_add(Vec::add(sq[0], sq[1]));
  for (std::int64_t i = nv; i < n; ++i) {
    float v = detail::load_as_f32(x, job.x_dtype, i);
    if (res) {
      v += detail::load_as_f32(res, job.residual_dtype, i);
      if (job.x_dtype == DType::kF16) v = detail::f16_to_f32(detail::f32_to_f16(v));
      if (job.x_dtype == DType::kBF16) v = detail::bf16_to_f32(detail::f32_to_bf16(v));
      if (sum) detail::store_from_f32(sum, job.x_dtype, i, v);
    }
    if constexpr (kCopy == RowCopy::kF32) row[i] = v;
    if constexpr (kCopy == RowCopy::kStreamedSum) detail::store_from_f32(row, XT, i, v);
    const float d = kLayerNorm ? v - shift : v;
    total.d += d;
    total.d2 += d * d;
  }
  return total;
}

// Element 0 of the row as pass A widens it: LayerNorm's first shift.
inline float first_element(const detail::NormJob& job, std::int64_t r) {
  float v = detail::load_as_f32(job.x, job.x_dtype, r * job.x_stride);
  if (job.residual) {
    v += detail::load_as_f32(job.residual, job.residual_dtype, r * job.residual_stride);
    if (job.x_dtype == DType::kF16) v = detail::f16_to_f32(detail::f32_to_f16(v));
    if (job.x_dtype == DType::kBF16) v = detail::bf16_to_f32(detail::f32_to_bf16(v));
  }
  return v;
}

// The last pass: y = ((row - shift) - correction) * rstd * gamma + beta,
// stored in y's dtype (gamma, beta may be null); the mean in two parts, so
// a row whose mean is large against its spread keeps the deviations exact
// (one fp32 mean would be off by up to half its ulp: 5e-4 at 1e4).
template <DType ST, DType YT, bool kShift>
inline void normalize_store(const detail::NormJob& job, std::int64_t r, const void* row, float shift, float correction,
                            float rstd, const float* beta) {
  constexpr int W = Vec::W;
  const std::int64_t n = job.hidden, nv = n / W * W;
  void* y = static_cast<char*>(job.y) + r * job.y_stride * detail::norm_elem_bytes(job.y_dtype);
  const bool stream = job.stream && reinterpret_cast<std::uintptr_t>(y) % 64 == 0;
  const float* gamma = job.gamma;
  const typename Vec::T s = Vec::set1(shift), cr = Vec::set1(correction), rs = Vec::set1(rstd);
  for (std::int64_t i = 0; i < nv; i += W) {
    typename Vec::T v = load_vec<ST>(row, i);
    if constexpr (kShift) v = Vec::sub(Vec::sub(v, s), cr);
    v = Vec::mul(v, rs);
    if (gamma) v = Vec::mul(v, Vec::load(gamma + i));
    if (beta) v = Vec::add(v, Vec::load(beta + i));
    store_vec<YT>(y, i, v, stream);
  }
  for (std::int64_t i = nv; i < n; ++i) {
    float v = ((detail::load_as_f32(row, ST, i) - shift) - correction) * rstd;
    if (gamma) v *= gamma[i];
    if (beta) v += beta[i];
    detail::store_from_f32(y, job.y_dtype, i, v);
  }
}

// The passes after the first read the row again from L1/L2 where it lies in
// x's dtype: x itself, or the sum the fused call stores (RowCopy::kNone).
// Reading x again rather than a widened copy: RMSNorm bf16 at 16M elements
// 2.0-3.1 -> 1.5-1.8 ms on Zen 4 (the copy, gamma and the row overflowed
// L1).  Where that is not possible (a fused call that stores no sum, or y
// over the row in another layout, which would overwrite it before it is
// read) pass A keeps the row, widened, in the fp32 scratch (kF32).  A fused
// call whose outputs stream past the last-level cache sends its sum out
// through non-temporal stores and keeps the row in the scratch in x's
// dtype (kStreamedSum): the sum's ordinary stores read every line from
// memory before writing it, a fifth stream beside x, the residual, the sum
// and y.
template <DType XT, DType YT, RowCopy kCopy>
inline void norm_rows_from(const detail::NormJob& job, std::int64_t r0, std::int64_t r1, float* scratch) {
  constexpr DType ST = kCopy == RowCopy::kF32 ? DType::kF32 : XT;
  constexpr bool kScratch = kCopy != RowCopy::kNone;
  const std::int64_t n = job.hidden;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (std::int64_t r = r0; r < r1; ++r) {
    const void* row = kScratch      ? static_cast<const void*>(scratch)
                      : job.residual ? static_cast<const char*>(job.sum) + r * job.sum_stride * detail::norm_elem_bytes(XT)
                                     : static_cast<const char*>(job.x) + r * job.x_stride * detail::norm_elem_bytes(XT);
    // LayerNorm: the deviations d from a shift and their sum as the
    // correction (var = mean(d^2) - mean(d)^2, the mean = shift + mean(d)).
    // The shift is first the row's first element, in the pass that reads
    // the row; where that lies far from the mean (mean(d)^2 > 64 var, which
    // would cost more than 6 bits to cancellation), a second pass over the
    // row in L1 takes the deviations from the mean found: the corrected
    // two-pass algorithm, so a row whose mean is large against its spread
    // loses nothing to cancellation.  Never E[x^2] - E[x]^2 (shift 0).
    // RMSNorm: the mean square.
    float shift = 0.0f, correction = 0.0f, var;
    if (job.kind == NormKind::kLayerNorm) {
      shift = first_element(job, r);
      RowSums dev = widen_and_sum<true, XT, kCopy>(job, r, scratch, shift);
      correction = dev.d * inv_n;
      var = dev.d2 * inv_n - correction * correction;
      if (!(correction * correction <= 64.0f * var)) {
        shift += correction;
        dev = row_sums<ST>(row, n, shift);
        correction = dev.d * inv_n;
        var = dev.d2 * inv_n - correction * correction;
      }
      var = var < 0.0f ? 0.0f : var;  // rounding can leave it just below 0; NaN stays NaN
    } else {
      var = widen_and_sum<false, XT, kCopy>(job, r, scratch, 0.0f).d2 * inv_n;
    }
    const float rstd = 1.0f / std::sqrt(var + job.eps);
    if (job.mean) job.mean[r] = shift + correction;
    if (job.rstd) job.rstd[r] = rstd;
    if (job.kind == NormKind::kLayerNorm) {
      normalize_store<ST, YT, true>(job, r, row, shift, correction, rstd, job.beta);
    } else {
      normalize_store<ST, YT, false>(job, r, row, 0.0f, 0.0f, rstd, nullptr);
    }
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  if (job.stream) _mm_sfence();  // the streamed lines reach memory before the pool reports the item done
#endif
}

// Whether rows of `src` (x's dtype, `stride`) are still intact when read
// after y's row is written: y elsewhere, or y exactly over them (the same
// start, dtype and stride: each vector is read before it is written).
inline bool survives_y(const detail::NormJob& job, const void* src, std::int64_t stride) {
  if (job.rows <= 0 || job.hidden <= 0) return true;
  const std::int64_t xs = static_cast<std::int64_t>(detail::norm_elem_bytes(job.x_dtype));
  const std::int64_t ys = static_cast<std::int64_t>(detail::norm_elem_bytes(job.y_dtype));
  const auto s = reinterpret_cast<std::uintptr_t>(src), y = reinterpret_cast<std::uintptr_t>(job.y);
  const auto s_end = s + static_cast<std::uintptr_t>(((job.rows - 1) * stride + job.hidden) * xs);
  const auto y_end = y + static_cast<std::uintptr_t>(((job.rows - 1) * job.y_stride + job.hidden) * ys);
  if (y_end <= s || s_end <= y) return true;
  return y == s && ys == xs && job.y_stride == stride;
}

template <DType XT, DType YT>
inline void norm_rows_of(const detail::NormJob& job, std::int64_t r0, std::int64_t r1, float* scratch) {
  // Every streamed sum row starts on a line (the vector stores then lie on
  // their own 32- or 64-byte boundaries).
  const std::int64_t sum_row_bytes = job.sum_stride * static_cast<std::int64_t>(detail::norm_elem_bytes(XT));
  if (job.residual && job.sum && job.stream && reinterpret_cast<std::uintptr_t>(job.sum) % 64 == 0 &&
      (job.rows == 1 || sum_row_bytes % 64 == 0)) {
    return norm_rows_from<XT, YT, RowCopy::kStreamedSum>(job, r0, r1, scratch);
  }
  const bool reread = !job.residual ? survives_y(job, job.x, job.x_stride) : job.sum && survives_y(job, job.sum, job.sum_stride);
  if (reread) return norm_rows_from<XT, YT, RowCopy::kNone>(job, r0, r1, scratch);
  return norm_rows_from<XT, YT, RowCopy::kF32>(job, r0, r1, scratch);
}

// The kernel for the job's x and y dtypes (each loop then converts without
// a branch a vector).
template <DType XT>
inline void norm_rows_x(const detail::NormJob& job, std::int64_t r0, std::int64_t r1, float* row) {
  switch (job.y_dtype) {
    case DType::kF16: return norm_rows_of<XT, DType::kF16>(job, r0, r1, row);
    case DType::kBF16: return norm_rows_of<XT, DType::kBF16>(job, r0, r1, row);
    default: return norm_rows_of<XT, DType::kF32>(job, r0, r1, row);
  }
}
inline void norm_rows(const detail::NormJob& job, std::int64_t r0, std::int64_t r1, float* row) {
  switch (job.x_dtype) {
    case DType::kF16: return norm_rows_x<DType::kF16>(job, r0, r1, row);
    case DType::kBF16: return norm_rows_x<DType::kBF16>(job, r0, r1, row);
    default: return norm_rows_x<DType::kF32>(job, r0, r1, row);
  }
}

// The residual add alone (residual_add, the unfused calls' first): sum =
// x + residual rounded to x's dtype, the bits the fused call stores.
template <DType XT>
inline void add_rows_of(const detail::NormJob& job, std::int64_t r0, std::int64_t r1) {
  constexpr int W = Vec::W;
  const std::int64_t n = job.hidden, nv = n / W * W;
  const std::size_t xs = detail::norm_elem_bytes(XT), rs = detail::norm_elem_bytes(job.residual_dtype);
  for (std::int64_t r = r0; r < r1; ++r) {
    const void* x = static_cast<const char*>(job.x) + r * job.x_stride * xs;
    const void* res = static_cast<const char*>(job.residual) + r * job.residual_stride * rs;
    void* sum = static_cast<char*>(job.sum) + r * job.sum_stride * xs;
    // Whole vectors from a 64-byte-aligned row start stay aligned.
    const bool stream = job.stream && reinterpret_cast<std::uintptr_t>(sum) % 64 == 0;
    for (std::int64_t i = 0; i < nv; i += W) {
      store_vec<XT>(sum, i, Vec::add(load_vec<XT>(x, i), load_vec(res, job.residual_dtype, i)), stream);
    }
    for (std::int64_t i = nv; i < n; ++i) {
      detail::store_from_f32(sum, XT, i, detail::load_as_f32(x, XT, i) + detail::load_as_f32(res, job.residual_dtype, i));
    }
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  if (job.stream) _mm_sfence();  // the streamed lines reach memory before the pool reports the item done
#endif
}
inline void add_rows(const detail::NormJob& job, std::int64_t r0, std::int64_t r1, float*) {
  switch (job.x_dtype) {
    case DType::kF16: return add_rows_of<DType::kF16>(job, r0, r1);
    case DType::kBF16: return add_rows_of<DType::kBF16>(job, r0, r1);
    default: return add_rows_of<DType::kF32>(job, r0, r1);
  }
}

}  // namespace fa::FA_KERNEL_NS
