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

// The activations below work on N independent vectors at once, each step
// over all N before the next: one vector's activation is a long chain of
// dependent operations (about 35 for the GELU), and a core runs several
// such chains side by side only when their operations sit close together
// in the instruction stream.

constexpr float kLog2e = 1.44269504088896341f;

// sigmoid(a) without overflow or cancellation in either tail.
template <int N>
inline void sigmoid_n(const typename Vec::T* a, typename Vec::T* out) {
  const typename Vec::T one = Vec::set1(1.0f);
  typename Vec::T e[N];
  for (int k = 0; k < N; ++k) e[k] = Vec::mul(Vec::sub(Vec::zero(), Vec::abs(a[k])), Vec::set1(kLog2e));
  for (int k = 0; k < N; ++k) e[k] = Vec::exp2(e[k]);
  for (int k = 0; k < N; ++k) out[k] = Vec::div(select_nonneg(a[k], one, e[k]), Vec::add(one, e[k]));
}

// Phi(g), the standard normal's distribution function.
template <int N>
inline void normal_cdf_n(const typename Vec::T* g, typename Vec::T* out) {
  const typename Vec::T one = Vec::set1(1.0f);
  typename Vec::T z[N], t[N], p[N], x[N];
  for (int k = 0; k < N; ++k) z[k] = Vec::mul(Vec::abs(g[k]), Vec::set1(0.70710678118654752f));
  for (int k = 0; k < N; ++k) t[k] = Vec::div(one, Vec::fmadd(z[k], Vec::set1(0.5f), one));
  for (int k = 0; k < N; ++k) p[k] = Vec::set1(0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f, 1.00002368f,
                  -1.26551223f}) {
    for (int k = 0; k < N; ++k) p[k] = Vec::fmadd(p[k], t[k], Vec::set1(c));
  }
  // P(t) - z^2 <= 0 for every z >= 0 (P(1) = 3e-8 at z = 0, the fit's own
  // error; the exp2 of the softmax treats it as 0).
  for (int k = 0; k < N; ++k) {
    const typename Vec::T hi = Vec::mul(z[k], z[k]);
    x[k] = Vec::mul(Vec::sub(Vec::sub(p[k], hi), square_low(z[k], hi)), Vec::set1(kLog2e));
  }
  for (int k = 0; k < N; ++k) x[k] = Vec::exp2(x[k]);
  for (int k = 0; k < N; ++k) {
    const typename Vec::T half_erfc = Vec::mul(Vec::mul(t[k], x[k]), Vec::set1(0.5f));
    out[k] = select_nonneg(g[k], Vec::sub(one, half_erfc), half_erfc);
  }
}

// act(g) of N vectors, in place.
template <GluKind K, int N>
inline void activate_n(typename Vec::T* g) {
  typename Vec::T f[N];
  if constexpr (K == GluKind::kSwiGlu) {
    sigmoid_n<N>(g, f);
  } else if constexpr (K == GluKind::kGeGluErf) {
    normal_cdf_n<N>(g, f);
  } else if constexpr (K == GluKind::kGeGluTanh) {
    // 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3).
    typename Vec::T u2[N];
    for (int k = 0; k < N; ++k) {
      u2[k] = Vec::mul(Vec::mul(g[k], Vec::set1(2.0f * 0.79788456080286536f)),
                       Vec::fmadd(Vec::mul(g[k], g[k]), Vec::set1(0.044715f), Vec::set1(1.0f)));
    }
    sigmoid_n<N>(u2, f);
  } else {
    // ReLU: max(0, g) with g second: MAXPS returns its second operand when
    // either is NaN, so a NaN gate stays NaN (and -inf gives 0).
    for (int k = 0; k < N; ++k) g[k] = Vec::max(Vec::zero(), g[k]);
    return;
  }
  for (int k = 0; k < N; ++k) g[k] = Vec::mul(g[k], f[k]);
}

// Vectors a main-loop step activates together.
constexpr int kInterleave = 4;

template <GluKind K, DType XT, DType YT>
inline void glu_rows(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  constexpr int W = Vec::W;
  constexpr std::int64_t xs = XT == DType::kF32 ? 4 : 2, ys = YT == DType::kF32 ? 4 : 2;
  for (std::int64_t r = r0; r < r1; ++r) {
    const char* gate = static_cast<const char*>(job.gate) + r * job.x_stride * xs;
    const char* up = static_cast<const char*>(job.up) + r * job.x_stride * xs;
    char* y = static_cast<char*>(job.y) + r * job.y_stride * ys;
    // Whole vectors from a 64-byte-aligned row start stay aligned (c0 is a
    // multiple of 64 elements).
    const bool stream = job.stream && reinterpret_cast<std::uintptr_t>(y) % 64 == 0;
    std::int64_t c = c0;
    for (; c + kInterleave * W <= c1; c += kInterleave * W) {
      typename Vec::T g[kInterleave];
      for (int k = 0; k < kInterleave; ++k) g[k] = load_vec<XT>(gate, c + k * W);
      activate_n<K, kInterleave>(g);
      for (int k = 0; k < kInterleave; ++k) store_vec<YT>(y, c + k * W, Vec::mul(g[k], load_vec<XT>(up, c + k * W)), stream);
    }
    for (; c + W <= c1; c += W) {
      typename Vec::T g = load_vec<XT>(gate, c);
      activate_n<K, 1>(&g);
      store_vec<YT>(y, c, Vec::mul(g, load_vec<XT>(up, c)), stream);
    }
    if (c < c1) {
      // The tail through the same vector code, from a padded copy, so every
      // element sees the same arithmetic.
      alignas(64) float g[W] = {}, u[W] = {}, out[W];
      for (std::int64_t k = c; k < c1; ++k) {
        g[k - c] = detail::load_as_f32(gate, XT, k);
        u[k - c] = detail::load_as_f32(up, XT, k);
      }
      typename Vec::T v = Vec::load(g);
      activate_n<K, 1>(&v);
      Vec::store(out, Vec::mul(v, Vec::load(u)));
      for (std::int64_t k = c; k < c1; ++k) detail::store_from_f32(y, YT, k, out[k - c]);
    }
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  if (job.stream) _mm_sfence();  // the streamed lines reach memory before the pool reports the item done
#endif
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
