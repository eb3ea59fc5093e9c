// The GLU kernel, written once over the attention kernels' vector policy
// (flash_attention/kernels/vec_*.h, `Vec`, whose exp2 the softmax uses) and
// the shared vector loads and stores (vec_io.h), compiled per path by
// kernels/glu_<path>.cpp inside its own FA_KERNEL_NS, templated on where
// act(g) comes from (ComputedActivation, or on the AVX2 and AVX-512 paths
// LookedUpActivation: a gather from glu.cpp's table of act at every 16-bit
// gate value, which this same code computed) and on x's and y's dtypes.
//
// The sigmoids: on the AVX-512 paths g / (1 + 2^x) as written, with an
// exp2 of their own that takes any argument; elsewhere the softmax's exp2,
// which takes only non-positive ones, so sigmoid(a) = 1 / (1 + e) for
// a >= 0 and e / (1 + e) below, e = exp(-|a|).  Phi(g) = 1 - Q(|g|) for
// g >= 0 and Q(|g|) below, Q the normal's upper tail: on the AVX-512 paths
// from a table of piecewise polynomials of log2 Q, elsewhere with
// Q = erfc(|g|/sqrt 2) / 2 from the Chebyshev fit t exp(-z^2 + P(t)),
// t = 1 / (1 + z/2), of Numerical Recipes (relative error below 1.2e-7 for
// every z >= 0), z^2 split into two parts where the path has FMA.
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

#if defined(__AVX512F__)
// 2^x for every x: VREDUCEPS takes x apart (f = 0 for +-inf), VSCALEFPS
// puts 2^n back (inf past 2^127, denormals and then 0 below 2^-126, NaN
// kept), around a degree-5 polynomial fitted for least relative error on
// [-0.5, 0.5] (7.5e-8; 2.1e-7 with fp32 steps: a tenth of the bound the
// tests hold each output to, check_glu in glu/drivers/glu_case.cpp).  The
// softmax's exp2 keeps a degree-6 polynomial and a mask that flushes
// denormals; the activations need neither, and save two operations a
// vector.
inline __m512 exp2_any(__m512 x) {
  const __m512 f = _mm512_reduce_ps(x, 0x08);  // x - round-to-nearest(x), exact
  __m512 p = _mm512_set1_ps(1.3276428e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6755270e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5507131e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022120e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314694e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001f));
  return _mm512_scalef_ps(p, _mm512_sub_ps(x, f));
}
#endif

// g / (1 + 2^x), N vectors, g in place: g sigmoid(a) with x = -a log2 e.
// (x may be g: each x[k] is read before g[k] is written.)
template <int N>
inline void times_sigmoid_n(const typename Vec::T* x, typename Vec::T* g) {
  const typename Vec::T one = Vec::set1(1.0f);
  typename Vec::T e[N];
#if defined(__AVX512F__)
  // As written, with an exp2 that takes any argument: neither tail cancels
  // (for a < 0 the denominator is large and exact to its rounding, and the
  // quotient as accurate), and it takes a third of the operations of the
  // form below (SwiGLU, 128K bf16 outputs in L2, one Zen 4 core: 40 -> 31
  // us).
  for (int k = 0; k < N; ++k) e[k] = exp2_any(x[k]);
  for (int k = 0; k < N; ++k) g[k] = Vec::div(g[k], Vec::add(one, e[k]));
#else
  // The other paths' exp2 holds its argument to <= 0 (the softmax's), so
  // it is taken of -|x|: 1 / (1 + 2^x) = 1 / (1 + e) for x <= 0 and
  // e / (1 + e) above, e = 2^-|x|.
  for (int k = 0; k < N; ++k) e[k] = Vec::exp2(Vec::sub(Vec::zero(), Vec::abs(x[k])));
  for (int k = 0; k < N; ++k) {
    const typename Vec::T a = Vec::sub(Vec::zero(), x[k]);  // the sign of a
    g[k] = Vec::mul(g[k], Vec::div(select_nonneg(a, one, e[k]), Vec::add(one, e[k])));
  }
#endif
}

#if defined(__AVX512F__)
// log2 Q(a), Q(a) = Phi(-a) the normal's upper tail, on a in [i, i + 1) for
// i = 0..15 as P_i(a - i), P_i of degree 5 fitted to float64 log2 Q for the
// least error relative to the test's bound (fp32's own error in Phi,
// 2^-21 (4 + a^2/2) of it): the fit is within 2% of that bound, evaluated in
// fp32 within 18%.  Row k holds the coefficient of x^(5-k) for the 16
// intervals, one zmm register each, so a lane's interval selects its
// coefficient in one VPERMPS.  Past a = 13, Q < 2^-126: denormals, then 0.
// Generated by glu/fit_normal_tail.py.
alignas(64) inline constexpr float kLog2NormalTail[6][16] = {
    {-0.00048419222, -0.000482523028, -0.000244024632, -0.000111818255, -5.24566785e-05, -2.60226843e-05, -1.37189554e-05, -7.65691857e-06, -4.49629988e-06, -2.76028823e-06, -1.76138667e-06, -1.16255012e-06, -7.90191109e-07, -5.51186588e-07, -3.93298563e-07, -2.86449847e-07},
    {0.00736948242, 0.00463002641, 0.00225913455, 0.00108528114, 0.000548186712, 0.000295286445, 0.000169231862, 0.000102478218, 6.50762377e-05, 4.3041342e-05, 2.94772653e-05, 2.0802474e-05, 1.506632e-05, 1.11613408e-05, 8.43384532e-06, 6.48539663e-06},
    {-0.0526302792, -0.0280472245, -0.0142176943, -0.00754145207, -0.00428219466, -0.00259787822, -0.00166948989, -0.00112609309, -0.000790851482, -0.000574471429, -0.000429313746, -0.000328662893, -0.000256857777, -0.00020435304, -0.000165126272, -0.000135260983},
    {-0.459180295, -0.57774502, -0.638924718, -0.670455515, -0.687682688, -0.697763205, -0.70404464, -0.708174646, -0.71101445, -0.713041425, -0.714534163, -0.715662837, -0.716535628, -0.717223704, -0.717775285, -0.718223989},
    {-1.15110755, -2.20030379, -3.42382526, -4.7365098, -6.09626245, -7.48254347, -8.88481236, -10.2973013, -11.7166576, -13.1408215, -14.568469, -15.9987164, -17.4309502, -18.8647366, -20.2997551, -21.7357693},
    {-0.99999994, -2.6560328, -5.45798111, -9.53293419, -14.9464674, -21.7341976, -29.9168339, -39.507206, -50.5137138, -62.9421158, -76.7965088, -92.0799179, -108.794601, -126.942329, -146.52449, -167.542175}
};

// Phi(g) by the table above: no division and no erfc fit, and fewer
// floating-point operations than the form below (GeGLU erf bf16, 16M outputs
// in cache on Zen 4: 5.4 -> 4.1 ms; the six VPERMPS cost about 0.6 of it).
template <int N>
inline void normal_cdf_n(const typename Vec::T* g, typename Vec::T* out) {
  __m512 x[N], p[N];
  __m512i interval[N];
  for (int k = 0; k < N; ++k) {
    // |g| held to [0, 15]: a NaN gate becomes 15 here (MINPS returns its
    // second operand), and stays NaN through g Phi(g).
    const __m512 a = _mm512_min_ps(Vec::abs(g[k]), _mm512_set1_ps(15.0f));
    interval[k] = _mm512_cvttps_epi32(a);
    x[k] = _mm512_reduce_ps(a, 0x09);  // a - floor(a), exact
  }
  for (int k = 0; k < N; ++k) p[k] = _mm512_permutexvar_ps(interval[k], _mm512_load_ps(kLog2NormalTail[0]));
  for (int row = 1; row < 6; ++row) {
    for (int k = 0; k < N; ++k) {
      p[k] = _mm512_fmadd_ps(p[k], x[k], _mm512_permutexvar_ps(interval[k], _mm512_load_ps(kLog2NormalTail[row])));
    }
  }
  for (int k = 0; k < N; ++k) p[k] = exp2_any(p[k]);
  for (int k = 0; k < N; ++k) out[k] = select_nonneg(g[k], Vec::sub(Vec::set1(1.0f), p[k]), p[k]);
}
#else
// Phi(g), the standard normal's distribution function.
template <int N>
inline void normal_cdf_n(const typename Vec::T* g, typename Vec::T* out) {
  const typename Vec::T one = Vec::set1(1.0f);
  typename Vec::T z[N], t[N], p[N], x[N];
  // |g| held to 15 as on the AVX-512 paths (Q(15) is far below fp32's
  // least value): past about 2^64, z^2 overflowed and its low part, inf -
  // inf, made Phi NaN; a NaN gate becomes 15 here and stays NaN in g Phi(g).
  for (int k = 0; k < N; ++k) z[k] = Vec::mul(Vec::min(Vec::abs(g[k]), Vec::set1(15.0f)), Vec::set1(0.70710678118654752f));
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
#endif

// act(g) of N vectors, in place.
template <GluKind K, int N>
inline void activate_n(typename Vec::T* g) {
  if constexpr (K == GluKind::kSwiGlu) {
    typename Vec::T x[N];
    for (int k = 0; k < N; ++k) x[k] = Vec::mul(g[k], Vec::set1(-kLog2e));
    times_sigmoid_n<N>(x, g);
  } else if constexpr (K == GluKind::kGeGluErf) {
    typename Vec::T f[N];
    normal_cdf_n<N>(g, f);
    for (int k = 0; k < N; ++k) g[k] = Vec::mul(g[k], f[k]);
  } else if constexpr (K == GluKind::kGeGluTanh) {
    // 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3):
    // x = -2u log2 e = g (c1 + c2 g^2).
    constexpr float c1 = -2.0f * 0.79788456080286536f * kLog2e, c2 = c1 * 0.044715f;
    typename Vec::T x[N];
    for (int k = 0; k < N; ++k) x[k] = Vec::mul(g[k], Vec::fmadd(Vec::mul(g[k], g[k]), Vec::set1(c2), Vec::set1(c1)));
    times_sigmoid_n<N>(x, g);
  } else {
    // ReLU: max(0, g) with g second: MAXPS returns its second operand when
    // either is NaN, so a NaN gate stays NaN (and -inf gives 0).
    for (int k = 0; k < N; ++k) g[k] = Vec::max(Vec::zero(), g[k]);
  }
}

// Vectors a main-loop step activates together.
constexpr int kInterleave = 4;
// How far ahead of the step the gate and up halves are prefetched.
constexpr std::int64_t kPrefetchBytes = 1024;

// act(g) of N gate vectors from element c of a gate row, computed.
template <GluKind K, DType XT>
struct ComputedActivation {
  template <int N>
  void gates(const char* gate, std::int64_t c, typename Vec::T* g) const {
    for (int k = 0; k < N; ++k) g[k] = load_vec<XT>(gate, c + k * Vec::W);
    activate_n<K, N>(g);
  }
  // N vectors of 2W bf16 gates from element c in split order (glu_row_split).
  template <int N>
  void split_gates(const char* gate, std::int64_t c, typename Vec::T* g) const {
    for (int k = 0; k < N / 2; ++k) {
      const typename Vec::T pairs = Vec::load_pairs(reinterpret_cast<const std::uint16_t*>(gate) + c + 2 * k * Vec::W);
      g[2 * k] = Vec::bf16_even(pairs);
      g[2 * k + 1] = Vec::bf16_odd(pairs);
    }
    activate_n<K, N>(g);
  }
};

#if defined(__AVX512F__) || defined(__AVX2__)
// act(g) of N gate vectors read from a table of act over every 16-bit gate
// value (GluJob::activation), the gate's bits the index: one gather a vector
// on the AVX-512 paths, eight loads a vector on avx2 (Zen 3's VGATHERDPS
// took 1.5x the loads' time: SwiGLU bf16, 128K outputs in cache, one
// thread, 0.100 against 0.054-0.070 ms).
template <DType XT>
struct LookedUpActivation {
  static_assert(XT == DType::kF16 || XT == DType::kBF16, "a table covers 16-bit gates only");
  const float* table;
  template <int N>
  void gates(const char* gate, std::int64_t c, typename Vec::T* g) const {
    for (int k = 0; k < N; ++k) {
      const char* at = gate + (c + k * Vec::W) * 2;
#if defined(__AVX512F__)
      g[k] = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at))), table, 4);
#else
      const auto* i = reinterpret_cast<const std::uint16_t*>(at);
      const float* t = table;
      g[k] = _mm256_setr_ps(t[i[0]], t[i[1]], t[i[2]], t[i[3]], t[i[4]], t[i[5]], t[i[6]], t[i[7]]);
#endif
    }
  }
#if defined(__AVX2__) && !defined(__AVX512F__)
  // In split order (glu_row_split): each 32-bit pair's low and high gates
  // are the indices.
  template <int N>
  void split_gates(const char* gate, std::int64_t c, typename Vec::T* g) const {
    for (int k = 0; k < N / 2; ++k) {
      const std::uint16_t* at = reinterpret_cast<const std::uint16_t*>(gate) + c + 2 * k * Vec::W;
      const float* t = table;
      g[2 * k] = _mm256_setr_ps(t[at[0]], t[at[2]], t[at[4]], t[at[6]], t[at[8]], t[at[10]], t[at[12]], t[at[14]]);
      g[2 * k + 1] = _mm256_setr_ps(t[at[1]], t[at[3]], t[at[5]], t[at[7]], t[at[9]], t[at[11]], t[at[13]], t[at[15]]);
    }
  }
#endif
};
#endif

// The lines of both halves' next `bytes` from byte `at`, kPrefetchBytes
// ahead: the hardware prefetchers alone left SwiGLU 5-10% short of its
// streaming time (bf16, 16M outputs).
inline void prefetch_halves(const char* gate, const char* up, std::int64_t at, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) {
    __builtin_prefetch(gate + at + kPrefetchBytes + b, 0, 3);
    __builtin_prefetch(up + at + kPrefetchBytes + b, 0, 3);
  }
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// bf16 in and out on AVX2 (Vec::kSplitBf16): each 2W elements of the gate
// and up halves loaded as W 32-bit pairs and widened as their even and odd
// values, and the products stored back as one pair vector
// (store_bf16_split): no widening load, pack or permute.  The same bits as
// glu_rows, value for value.  The main loop's steps only; glu_rows takes
// the rest of the row.
template <class Activation>
inline std::int64_t glu_row_split(const Activation& act, const char* gate, const char* up, char* y, std::int64_t c,
                                  std::int64_t c1, bool stream) {
  constexpr int W = Vec::W;
  for (; c + kInterleave * W <= c1; c += kInterleave * W) {
    prefetch_halves(gate, up, c * 2, kInterleave * W * 2);
    typename Vec::T g[kInterleave];
    act.template split_gates<kInterleave>(gate, c, g);
    for (int k = 0; k < kInterleave / 2; ++k) {
      const typename Vec::T pairs = Vec::load_pairs(reinterpret_cast<const std::uint16_t*>(up) + c + 2 * k * W);
      store_bf16_split(y, c + 2 * k * W, Vec::mul(g[2 * k], Vec::bf16_even(pairs)),
                       Vec::mul(g[2 * k + 1], Vec::bf16_odd(pairs)), stream);
    }
  }
  return c;
}
#endif

template <DType XT, DType YT, class Activation>
inline void glu_rows(const detail::GluJob& job, const Activation& act, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                     std::int64_t c1) {
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
#if defined(__AVX2__) && !defined(__AVX512F__)
    if constexpr (Vec::kSplitBf16 && XT == DType::kBF16 && YT == DType::kBF16) c = glu_row_split(act, gate, up, y, c, c1, stream);
#endif
    for (; c + kInterleave * W <= c1; c += kInterleave * W) {
      prefetch_halves(gate, up, c * xs, kInterleave * W * xs);
      typename Vec::T g[kInterleave];
      act.template gates<kInterleave>(gate, c, g);
      for (int k = 0; k < kInterleave; ++k) store_vec<YT>(y, c + k * W, Vec::mul(g[k], load_vec<XT>(up, c + k * W)), stream);
    }
    for (; c + W <= c1; c += W) {
      typename Vec::T g;
      act.template gates<1>(gate, c, &g);
      store_vec<YT>(y, c, Vec::mul(g, load_vec<XT>(up, c)), stream);
    }
    if (c < c1) {
      // The tail through the same vector code, from a copy padded with
      // zeros, so every element sees the same arithmetic.
      alignas(64) unsigned char g_bytes[W * 4] = {}, u_bytes[W * 4] = {};
      alignas(64) float out[W];
      for (std::int64_t b = 0; b < (c1 - c) * xs; ++b) {
        g_bytes[b] = static_cast<unsigned char>(gate[c * xs + b]);
        u_bytes[b] = static_cast<unsigned char>(up[c * xs + b]);
      }
      typename Vec::T v;
      act.template gates<1>(reinterpret_cast<const char*>(g_bytes), 0, &v);
      Vec::store(out, Vec::mul(v, load_vec<XT>(u_bytes, 0)));
      for (std::int64_t k = c; k < c1; ++k) detail::store_from_f32(y, YT, k, out[k - c]);
    }
  }
#if defined(__AVX2__) || defined(__AVX512F__)
  if (job.stream) _mm_sfence();  // the streamed lines reach memory before the pool reports the item done
#endif
}

// The output dtype's instantiation.
template <DType XT, class Activation>
inline void glu_rows_to(const detail::GluJob& job, const Activation& act, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                        std::int64_t c1) {
  switch (job.y_dtype) {
    case DType::kF16: return glu_rows<XT, DType::kF16>(job, act, r0, r1, c0, c1);
    case DType::kBF16: return glu_rows<XT, DType::kBF16>(job, act, r0, r1, c0, c1);
    default: return glu_rows<XT, DType::kF32>(job, act, r0, r1, c0, c1);
  }
}

template <GluKind K>
inline void glu_run_kind(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  switch (job.x_dtype) {
    case DType::kF16: return glu_rows_to<DType::kF16>(job, ComputedActivation<K, DType::kF16>{}, r0, r1, c0, c1);
    case DType::kBF16: return glu_rows_to<DType::kBF16>(job, ComputedActivation<K, DType::kBF16>{}, r0, r1, c0, c1);
    default: return glu_rows_to<DType::kF32>(job, ComputedActivation<K, DType::kF32>{}, r0, r1, c0, c1);
  }
}

inline void glu_run(const detail::GluJob& job, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
#if defined(__AVX512F__) || defined(__AVX2__)
  if (job.activation) {  // 16-bit gates (glu.cpp sets the table only for those)
    if (job.x_dtype == DType::kF16) return glu_rows_to<DType::kF16>(job, LookedUpActivation<DType::kF16>{job.activation}, r0, r1, c0, c1);
    return glu_rows_to<DType::kBF16>(job, LookedUpActivation<DType::kBF16>{job.activation}, r0, r1, c0, c1);
  }
#endif
  switch (job.kind) {
    case GluKind::kSwiGlu: return glu_run_kind<GluKind::kSwiGlu>(job, r0, r1, c0, c1);
    case GluKind::kGeGluErf: return glu_run_kind<GluKind::kGeGluErf>(job, r0, r1, c0, c1);
    case GluKind::kGeGluTanh: return glu_run_kind<GluKind::kGeGluTanh>(job, r0, r1, c0, c1);
    case GluKind::kReGlu: return glu_run_kind<GluKind::kReGlu>(job, r0, r1, c0, c1);
  }
}

}  // namespace fa::FA_KERNEL_NS
