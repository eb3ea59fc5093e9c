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
#include <type_traits>

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
// (RMSNorm's only statistic).  kFused: job.residual is set (a template
// argument, so the plain call's loop carries no test of it).
template <bool kLayerNorm, DType XT, RowCopy kCopy, bool kFused>
inline RowSums widen_and_sum_of(const detail::NormJob& job, std::int64_t r, float* row, float shift) {
  constexpr int W = Vec::W;
  constexpr std::int64_t xs = XT == DType::kF32 ? 4 : 2;
  const std::int64_t n = job.hidden, nv = n / W * W;
  const char* x = static_cast<const char*>(job.x) + r * job.x_stride * xs;
  const std::int64_t rs = kFused ? static_cast<std::int64_t>(detail::norm_elem_bytes(job.residual_dtype)) : 0;
  const char* res = kFused ? static_cast<const char*>(job.residual) + r * job.residual_stride * rs : nullptr;
  void* sum = kFused && job.sum ? static_cast<char*>(job.sum) + r * job.sum_stride * xs : nullptr;
  auto element = [&](std::int64_t i) {
    typename Vec::T v = load_vec<XT>(x, i);
    if constexpr (kFused) {
      v = round_vec<XT>(Vec::add(v, load_vec(res, job.residual_dtype, i)));
      if (sum) store_vec<XT>(sum, i, v, kCopy == RowCopy::kStreamedSum);
    }
    if constexpr (kCopy == RowCopy::kF32) Vec::store(row + i, v);
    if constexpr (kCopy == RowCopy::kStreamedSum) store_vec<XT>(row, i, v, false);
    return v;
  };
  // The next row's x (and residual) lines, those of each step of this row's
  // first pass: the row's other passes run from L1, and without them the
  // stream from memory would wait there (LayerNorm bf16 read at half
  // RMSNorm's rate).  Four vectors a step into four sums, independent
  // chains (two left the avx2 loop waiting on its FMAs' latency).
  constexpr int kStep = 4;
  const std::int64_t x_next = job.x_stride * xs, res_next = kFused ? job.residual_stride * rs : 0;
  const bool prefetch_next = r + 1 < job.rows;
  const typename Vec::T k = Vec::set1(shift);
  typename Vec::T acc[kStep], sq[kStep];
  for (int j = 0; j < kStep; ++j) acc[j] = sq[j] = Vec::zero();
  auto take = [&](int j, typename Vec::T v) {
    if constexpr (kLayerNorm) {
      v = Vec::sub(v, k);
      acc[j] = Vec::add(acc[j], v);
    }
    sq[j] = Vec::fmadd(v, v, sq[j]);
  };
  std::int64_t i = 0;
  for (; i + kStep * W <= nv; i += kStep * W) {
    if (prefetch_next) {
      for (std::int64_t b = 0; b < kStep * W * xs; b += 64) __builtin_prefetch(x + x_next + i * xs + b, 0, 3);
      if constexpr (kFused) {
        for (std::int64_t b = 0; b < kStep * W * rs; b += 64) __builtin_prefetch(res + res_next + i * rs + b, 0, 3);
      }
    }
    for (int j = 0; j < kStep; ++j) take(j, element(i + j * W));
  }
  for (; i < nv; i += W) take(0, element(i));
  RowSums total;
  total.d = Vec::reduce_add(Vec::add(Vec::add(acc[0], acc[1]), Vec::add(acc[2], acc[3])));
  total.d2 = Vec::reduce_add(Vec::add(Vec::add(sq[0], sq[1]), Vec::add(sq[2], sq[3])));
  for (std::int64_t i = nv; i < n; ++i) {
    float v = detail::load_as_f32(x, XT, i);
    if constexpr (kFused) {
      v += detail::load_as_f32(res, job.residual_dtype, i);
      if (XT == DType::kF16) v = detail::f16_to_f32(detail::f32_to_f16(v));
      if (XT == DType::kBF16) v = detail::bf16_to_f32(detail::f32_to_bf16(v));
      if (sum) detail::store_from_f32(sum, XT, i, v);
    }
    if constexpr (kCopy == RowCopy::kF32) row[i] = v;
    if constexpr (kCopy == RowCopy::kStreamedSum) detail::store_from_f32(row, XT, i, v);
    const float d = kLayerNorm ? v - shift : v;
    total.d += d;
    total.d2 += d * d;
  }
  return total;
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// bf16 rows on AVX2 (Vec::kSplitBf16), x and y (and the residual) bf16: each
// 2W elements loaded as W 32-bit pairs and widened as their even and odd
// values (one operation for W values, where the widening load and shift
// take two), and y rounded in the lanes and put back as one pair vector
// (store_bf16_split: no pack or permute).  Pass A on the split values:
// the sums over the same elements in another order.
template <bool kLayerNorm, RowCopy kCopy, bool kFused>
inline RowSums widen_and_sum_split(const detail::NormJob& job, std::int64_t r, float* row, float shift) {
  constexpr int W = Vec::W;
  const std::int64_t n = job.hidden;
  const auto* x = static_cast<const std::uint16_t*>(job.x) + r * job.x_stride;
  const auto* res = kFused ? static_cast<const std::uint16_t*>(job.residual) + r * job.residual_stride : nullptr;
  void* sum = kFused && job.sum ? static_cast<std::uint16_t*>(job.sum) + r * job.sum_stride : nullptr;
  const bool prefetch_next = r + 1 < job.rows;
  const typename Vec::T k = Vec::set1(shift);
  const __m256 high = _mm256_castsi256_ps(_mm256_set1_epi32(-65536));
  typename Vec::T acc[4], sq[4];
  for (int j = 0; j < 4; ++j) acc[j] = sq[j] = Vec::zero();
  auto take = [&](int j, typename Vec::T v) {
    if constexpr (kLayerNorm) {
      v = Vec::sub(v, k);
      acc[j] = Vec::add(acc[j], v);
    }
    sq[j] = Vec::fmadd(v, v, sq[j]);
  };
  // The even and odd values of the 2W elements at i (with the residual's
  // added and rounded to bf16 in the lanes, the sum stored).
  auto pair = [&](std::int64_t i, typename Vec::T* even, typename Vec::T* odd) {
    const typename Vec::T p = Vec::load_pairs(x + i);
    *even = Vec::bf16_even(p);
    *odd = Vec::bf16_odd(p);
    if constexpr (kFused) {
      const typename Vec::T q = Vec::load_pairs(res + i);
      *even = _mm256_and_ps(_mm256_castsi256_ps(bf16_rounded_high(Vec::add(*even, Vec::bf16_even(q)))), high);
      *odd = _mm256_and_ps(_mm256_castsi256_ps(bf16_rounded_high(Vec::add(*odd, Vec::bf16_odd(q)))), high);
      if (sum) store_bf16_split_exact(sum, i, *even, *odd, kCopy == RowCopy::kStreamedSum);
      if constexpr (kCopy == RowCopy::kStreamedSum) store_bf16_split_exact(row, i, *even, *odd, false);
    }
  };
  std::int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {  // one 64-byte line of x (and of the residual) a step
    if (prefetch_next) {
      __builtin_prefetch(x + job.x_stride + i, 0, 3);
      if constexpr (kFused) __builtin_prefetch(res + job.residual_stride + i, 0, 3);
    }
    typename Vec::T e0, o0, e1, o1;
    pair(i, &e0, &o0);
    pair(i + 2 * W, &e1, &o1);
    take(0, e0);
    take(1, o0);
    take(2, e1);
    take(3, o1);
  }
  for (; i + 2 * W <= n; i += 2 * W) {
    typename Vec::T e, o;
    pair(i, &e, &o);
    take(0, e);
    take(1, o);
  }
  RowSums total;
  total.d = Vec::reduce_add(Vec::add(Vec::add(acc[0], acc[1]), Vec::add(acc[2], acc[3])));
  total.d2 = Vec::reduce_add(Vec::add(Vec::add(sq[0], sq[1]), Vec::add(sq[2], sq[3])));
  for (; i < n; ++i) {
    float v = detail::bf16_to_f32(x[i]);
    if constexpr (kFused) {
      v = detail::bf16_to_f32(detail::f32_to_bf16(v + detail::bf16_to_f32(res[i])));
      if (sum) detail::store_from_f32(sum, DType::kBF16, i, v);
      if constexpr (kCopy == RowCopy::kStreamedSum) detail::store_from_f32(row, DType::kBF16, i, v);
    }
    const float d = kLayerNorm ? v - shift : v;
    total.d += d;
    total.d2 += d * d;
  }
  return total;
}
#endif

// Whether pass A takes the split form: bf16 x (and residual) and y on AVX2,
// the row read again in bf16 (not the fp32 scratch).
template <DType XT, DType YT, RowCopy kCopy>
inline constexpr bool kSplitRows = Vec::kSplitBf16 && XT == DType::kBF16 && YT == DType::kBF16 && kCopy != RowCopy::kF32;

template <bool kLayerNorm, DType XT, DType YT, RowCopy kCopy>
inline RowSums widen_and_sum(const detail::NormJob& job, std::int64_t r, float* row, float shift) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (kSplitRows<XT, YT, kCopy>) {
    if (!job.residual) return widen_and_sum_split<kLayerNorm, kCopy, false>(job, r, row, shift);
    if (job.residual_dtype == DType::kBF16) return widen_and_sum_split<kLayerNorm, kCopy, true>(job, r, row, shift);
  }
#endif
  if (job.residual) return widen_and_sum_of<kLayerNorm, XT, kCopy, true>(job, r, row, shift);
  return widen_and_sum_of<kLayerNorm, XT, kCopy, false>(job, r, row, shift);
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

#if defined(__AVX2__) && !defined(__AVX512F__)
// gamma and beta in the split rows' order (widen_and_sum_split), into
// `out` (hidden floats each): for each 2W elements from i, the W
// even-indexed values at out + i, then the W odd ones; the last partial
// block is not used (the scalar tail reads the caller's).  Whether every
// value is finite.
inline bool split_params(const float* p, std::int64_t n, float* out) {
  static_assert(Vec::W == 8, "the AVX2 shuffles below");
  __m256 bad = _mm256_setzero_ps();  // x * 0: 0 where x is finite, NaN where it is not
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(p + i), b = _mm256_loadu_ps(p + i + 8);
    // Within 128-bit lanes, then the 64-bit quarters put in order.
    const __m256 even = _mm256_shuffle_ps(a, b, 0x88), odd = _mm256_shuffle_ps(a, b, 0xDD);
    _mm256_storeu_ps(out + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
    _mm256_storeu_ps(out + i + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8)));
    bad = _mm256_add_ps(bad, _mm256_add_ps(_mm256_mul_ps(a, _mm256_setzero_ps()), _mm256_mul_ps(b, _mm256_setzero_ps())));
  }
  float rest = 0.0f;
  for (; i < n; ++i) rest += p[i] * 0.0f;
  return Vec::reduce_add(bad) + rest == 0.0f;
}

// The last pass on the split rows: y as normalize_store computes it, each
// 2W elements from one load of pairs and one store.  not_nan: no output of
// the row can be NaN (its sums and gamma and beta finite: then |y| before
// gamma is at most sqrt(hidden), see norm_rows_from), so the rounding skips
// its NaN test.
template <bool kShift>
inline void normalize_store_split(const detail::NormJob& job, std::int64_t r, const void* row, float shift, float correction,
                                  float rstd, const float* gamma_split, const float* beta_split, bool not_nan) {
  constexpr int W = Vec::W;
  const std::int64_t n = job.hidden;
  const auto* in = static_cast<const std::uint16_t*>(row);
  auto* y = static_cast<std::uint16_t*>(job.y) + r * job.y_stride;
  const bool stream = job.stream && reinterpret_cast<std::uintptr_t>(y) % 64 == 0;
  const typename Vec::T s = Vec::set1(shift), cr = Vec::set1(correction), rs = Vec::set1(rstd);
  auto blocks = [&](auto not_nan_tag) {
    std::int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      const typename Vec::T p = Vec::load_pairs(in + i);
      typename Vec::T e = Vec::bf16_even(p), o = Vec::bf16_odd(p);
      if constexpr (kShift) {
        e = Vec::sub(Vec::sub(e, s), cr);
        o = Vec::sub(Vec::sub(o, s), cr);
      }
      e = Vec::mul(e, rs);
      o = Vec::mul(o, rs);
      if (gamma_split) {
        e = Vec::mul(e, Vec::load(gamma_split + i));
        o = Vec::mul(o, Vec::load(gamma_split + i + W));
      }
      if (beta_split) {
        e = Vec::add(e, Vec::load(beta_split + i));
        o = Vec::add(o, Vec::load(beta_split + i + W));
      }
      store_bf16_split<decltype(not_nan_tag)::value>(y, i, e, o, stream);
    }
    return i;
  };
  for (std::int64_t i = not_nan ? blocks(std::true_type{}) : blocks(std::false_type{}); i < n; ++i) {
    float v = ((detail::bf16_to_f32(in[i]) - shift) - correction) * rstd;
    if (gamma_split) v *= job.gamma[i];
    if (beta_split) v += job.beta[i];
    detail::store_from_f32(y, DType::kBF16, i, v);
  }
}
#endif

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
  [[maybe_unused]] constexpr bool kSplit = kSplitRows<XT, YT, kCopy>;
  [[maybe_unused]] const float* gamma_split = nullptr;
  [[maybe_unused]] const float* beta_split = nullptr;
  [[maybe_unused]] bool params_finite = true;
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (kSplit) {  // once per item, in the scratch after the row's room
    if (job.gamma) {
      params_finite = split_params(job.gamma, n, scratch + n);
      gamma_split = scratch + n;
    }
    if (job.beta && job.kind == NormKind::kLayerNorm) {
      params_finite = split_params(job.beta, n, scratch + 2 * n) && params_finite;
      beta_split = scratch + 2 * n;
    }
  }
#endif
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
      RowSums dev = widen_and_sum<true, XT, YT, kCopy>(job, r, scratch, shift);
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
      var = widen_and_sum<false, XT, YT, kCopy>(job, r, scratch, 0.0f).d2 * inv_n;
    }
    const float rstd = 1.0f / std::sqrt(var + job.eps);
    if (job.mean) job.mean[r] = shift + correction;
    if (job.rstd) job.rstd[r] = rstd;
#if defined(__AVX2__) && !defined(__AVX512F__)
    if constexpr (kSplit) {
      // Sums finite: every element finite, and |element - mean| * rstd at
      // most sqrt(hidden), so with gamma and beta finite no output is NaN.
      const bool not_nan = params_finite && std::isfinite(var);
      if (job.kind == NormKind::kLayerNorm) {
        normalize_store_split<true>(job, r, row, shift, correction, rstd, gamma_split, beta_split, not_nan);
      } else {
        normalize_store_split<false>(job, r, row, 0.0f, 0.0f, rstd, gamma_split, nullptr, not_nan);
      }
      continue;
    }
#endif
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
    std::int64_t i = 0;
#if defined(__AVX2__) && !defined(__AVX512F__)
    // bf16 on AVX2: the even and odd values of 2W elements a step (as the
    // fused call's split rows, whose sums these bits equal).
    if constexpr (Vec::kSplitBf16 && XT == DType::kBF16) {
      if (job.residual_dtype == DType::kBF16) {
        const auto* xp = static_cast<const std::uint16_t*>(x);
        const auto* rp = static_cast<const std::uint16_t*>(res);
        for (; i + 2 * W <= n; i += 2 * W) {
          const typename Vec::T a = Vec::load_pairs(xp + i), b = Vec::load_pairs(rp + i);
          store_bf16_split(sum, i, Vec::add(Vec::bf16_even(a), Vec::bf16_even(b)), Vec::add(Vec::bf16_odd(a), Vec::bf16_odd(b)), stream);
        }
      }
    }
#endif
    for (; i + W <= nv; i += W) {
      store_vec<XT>(sum, i, Vec::add(load_vec<XT>(x, i), load_vec(res, job.residual_dtype, i)), stream);
    }
    for (; i < n; ++i) {
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
