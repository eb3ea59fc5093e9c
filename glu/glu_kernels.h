// The GLU kernel, written once over the attention kernels' vector policy
// (flash_attention/kernels/vec_*.h, `Vec`, whose exp2 the softmax uses) and
// the shared vector loads and stores (vec_io.h), compiled per path by
// kernels/glu_<path>.cpp inside its own FA_KERNEL_NS, templated on the
// activation and on x's and y's dtypes.
//
// Every exponential is taken of a non-positive argument (the vector exp2 is
// built for the softmax's, and a positive one would overflow or, near the
// sigmoid's far tail, cancel): sigmoid(a) = 1 / (1 + e) for a >= 0 and
// e / (1 + e) below, e = exp(-|a|); Phi(g) = 1 - erfc(|g|/sqrt 2) / 2 for
// g >= 0 and erfc(|g|/sqrt 2) / 2 below, erfc from the Chebyshev fit
// t exp(-z^2 + P(t)), t = 1 / (1 + z/2), of Numerical Recipes (relative
// error below 1.2e-7 for every z >= 0), z^2 split into two parts where the
// path has FMA.
#pragma once

#include <cstdint>

#include "common/dtype_convert.h"
#include "glu_job.h"
#include "kernels/vec_io.h"

namespace fa::FA_KERNEL_NS {

// a >= 0 ? if_nonneg : if_neg, lane by lane (NaN lanes: if_neg; NaN then
// comes through the arithmetic either way).
inline typename Vec::T select_nonneg(typename Vec::T a, typename Vec::T if_nonneg, typename Vec::T if_neg) {
#if defined(__AVX512F__)
  const __mmask16 nonneg = _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_blend_ps(nonneg, if_neg, if_nonneg);
#elif defined(__AVX2__)
  return _mm256_blendv_ps(if_neg, if_nonneg, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GE_OQ));
#else
  const __m128 nonneg = _mm_cmpge_ps(a, _mm_setzero_ps());
  return _mm_or_ps(_mm_and_ps(nonneg, if_nonneg), _mm_andnot_ps(nonneg, if_neg));
#endif
}

// z^2 as hi + lo exactly where the path fuses multiply-add (lo 0 on the
// baseline path, whose fmadd rounds twice).
inline typename Vec::T square_low(typename Vec::T z, typename Vec::T hi) {
#if defined(__AVX512F__)
  return _mm512_fmsub_ps(z, z, hi);
#elif defined(__AVX2__)
  return _mm256_fmsub_ps(z, z, hi);
#else
  (void)z;
  (void)hi;
  return Vec::zero();
#endif
}

// 1 / x for x in [1, 2] (the sigmoid's 1 + e) or (0, 1] (the erfc fit's
// t): the path's reciprocal estimate (14 bits on AVX-512, 12 on AVX2 and
// SSE2) and one Newton step, x r (2 - x r), about fp32's precision, where a
// division costs several times as much.
inline typename Vec::T reciprocal(typename Vec::T x) {
#if defined(__AVX512F__)
  const __m512 r = _mm512_rcp14_ps(x);
#elif defined(__AVX2__)
  const __m256 r = _mm256_rcp_ps(x);
#else
  const __m128 r = _mm_rcp_ps(x);
#endif
  return Vec::mul(r, Vec::sub(Vec::set1(2.0f), Vec::mul(x, r)));
}

inline typename Vec::T exp_nonpositive(typename Vec::T a) { return Vec::exp2(Vec::mul(a, Vec::set1(1.44269504088896341f))); }

// sigmoid(a) without overflow or cancellation in either tail.
inline typename Vec::T sigmoid(typename Vec::T a) {
  const typename Vec::T e = exp_nonpositive(Vec::sub(Vec::zero(), Vec::abs(a)));
  const typename Vec::T one = Vec::set1(1.0f);
  return Vec::mul(select_nonneg(a, one, e), reciprocal(Vec::add(one, e)));
}

// Phi(g), the standard normal's distribution function.
inline typename Vec::T normal_cdf(typename Vec::T g) {
  // z capped at 1e4 (erfc is 0 long before) so t stays a finite reciprocal;
  // a NaN g comes through the product g Phi(g) all the same.
  const typename Vec::T z = Vec::sub(Vec::zero(), Vec::max(Vec::mul(Vec::abs(g), Vec::set1(-0.70710678118654752f)), Vec::set1(-1e4f)));
  const typename Vec::T one = Vec::set1(1.0f);
  const typename Vec::T t = reciprocal(Vec::fmadd(z, Vec::set1(0.5f), one));
  typename Vec::T p = Vec::set1(0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f, 1.00002368f,
                  -1.26551223f}) {
    p = Vec::fmadd(p, t, Vec::set1(c));
  }
  const typename Vec::T hi = Vec::mul(z, z), lo = square_low(z, hi);
  // P(t) - z^2 <= 0 for every z >= 0 (P(1) = 3e-8 at z = 0, the fit's own
  // error; the exp2 of the softmax treats it as 0).
  const typename Vec::T erfc = Vec::mul(t, exp_nonpositive(Vec::sub(Vec::sub(p, hi), lo)));
  const typename Vec::T half_erfc = Vec::mul(erfc, Vec::set1(0.5f));
  return select_nonneg(g, Vec::sub(one, half_erfc), half_erfc);
}

template <GluKind K>
inline typename Vec::T activate(typename Vec::T g) {
  if constexpr (K == GluKind::kSwiGlu) return Vec::mul(g, sigmoid(g));
  if constexpr (K == GluKind::kGeGluErf) return Vec::mul(g, normal_cdf(g));
  if constexpr (K == GluKind::kGeGluTanh) {
    // 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3).
    const typename Vec::T g2 = Vec::mul(g, g);
    const typename Vec::T u2 = Vec::mul(Vec::mul(g, Vec::set1(2.0f * 0.79788456080286536f)),
                                        Vec::fmadd(g2, Vec::set1(0.044715f), Vec::set1(1.0f)));
    return Vec::mul(g, sigmoid(u2));
  }
  if constexpr (K == GluKind::kReGlu) {
    // max(0, g) with g second: MAXPS returns its second operand when
    // either is NaN, so a NaN gate stays NaN (and -inf gives 0).
    return Vec::max(Vec::zero(), g);
  }
}

template <GluKind K, DType XT, DType YT>
inline void glu_rows(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  constexpr int W = Vec::W;
  constexpr std::int64_t xs = XT == DType::kF32 ? 4 : 2, ys = YT == DType::kF32 ? 4 : 2;
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* gate = static_cast<const char*>(job.gate) + r * job.x_stride * xs;
    const char* up = static_cast<const char*>(job.up) + r * job.x_stride * xs;
    char* y = static_cast<char*>(job.y) + r * job.y_stride * ys;
    std::int64_t c = c0;
    for (; c + W <= c1; c += W) {
      store_vec<YT>(y, c, Vec::mul(activate<K>(load_vec<XT>(gate, c)), load_vec<XT>(up, c)), false);
    }
    if (c < c1) {
      // The tail through the same vector code, from a padded copy, so every
      // element sees the same arithmetic.
      alignas(64) float g[W] = {}, u[W] = {}, out[W];
      for (std::int64_t k = c; k < c1; ++k) {
        g[k - c] = detail::load_as_f32(gate, XT, k);
        u[k - c] = detail::load_as_f32(up, XT, k);
      }
      Vec::store(out, Vec::mul(activate<K>(Vec::load(g)), Vec::load(u)));
      for (std::int64_t k = c; k < c1; ++k) detail::store_from_f32(y, YT, k, out[k - c]);
    }
  }
}

template <GluKind K, DType XT>
inline void glu_run_x(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  switch (job.y_dtype) {
    case DType::kF16: return glu_rows<K, XT, DType::kF16>(job, r0, r1, c0, c1);
    case DType::kBF16: return glu_rows<K, XT, DType::kBF16>(job, r0, r1, c0, c1);
    default: return glu_rows<K, XT, DType::kF32>(job, r0, r1, c0, c1);
  }
}

template <GluKind K>
inline void glu_run_kind(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  switch (job.x_dtype) {
    case DType::kF16: return glu_run_x<K, DType::kF16>(job, r0, r1, c0, c1);
    case DType::kBF16: return glu_run_x<K, DType::kBF16>(job, r0, r1, c0, c1);
    default: return glu_run_x<K, DType::kF32>(job, r0, r1, c0, c1);
  }
}

inline void glu_run(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  switch (job.kind) {
    case GluKind::kSwiGlu: return glu_run_kind<GluKind::kSwiGlu>(job, r0, r1, c0, c1);
    case GluKind::kGeGluErf: return glu_run_kind<GluKind::kGeGluErf>(job, r0, r1, c0, c1);
    case GluKind::kGeGluTanh: return glu_run_kind<GluKind::kGeGluTanh>(job, r0, r1, c0, c1);
    case GluKind::kReGlu: return glu_run_kind<GluKind::kReGlu>(job, r0, r1, c0, c1);
  }
}

}  // namespace fa::FA_KERNEL_NS
