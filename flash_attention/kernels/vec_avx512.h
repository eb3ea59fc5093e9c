// 16-lane fp32 vector policy on AVX-512 (F, BW, VL, DQ) + FMA + F16C.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "exp2_poly.h"

namespace fa::FA_KERNEL_NS {

struct Vec {
  using T = __m512;
  static constexpr int W = 16;
  static constexpr int kRows = 6;  // 6 x 4 accumulators + 4 loads + 1 broadcast of 32 registers
  static constexpr int kVecs = 4;
  static constexpr const char* kName = "avx512";

  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T abs(T a) { return _mm512_abs_ps(a); }
  static T copysign(T mag, T sign) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(abs(mag)),
                                               _mm512_and_si512(_mm512_castps_si512(sign), _mm512_set1_epi32(INT32_MIN))));
  }
  static float reduce_add(T v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(T v) { return _mm512_reduce_max_ps(v); }
  // out[0..3] = the sums of a, b, c and d (halves added, then one
  // transposing reduction).
  static void reduce_add4(T a, T b, T c, T d, float* out) {
    auto half = [](T v) {
      return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    };
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(half(a), half(b)), _mm256_hadd_ps(half(c), half(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
  static T load_f16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static T load_bf16(const std::uint16_t* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  // bf16 pairs split into even and odd values (see vec_avx2.h); not used
  // by this path's row products yet (kSplitBf16 false: unmeasured here).
  static constexpr bool kSplitBf16 = false;
  static T load_pairs(const std::uint16_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
  static T bf16_even(T pairs) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(pairs), 16)); }
  static T bf16_odd(T pairs) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(pairs), _mm512_set1_epi32(-65536))); }
  static T zero_if_neg_inf(T m) {
    const __mmask16 neg_inf = _mm512_cmp_ps_mask(m, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~neg_inf), m);
  }
  // 2^x = 2^n * 2^f, n = round(x), |f| <= 0.5: VREDUCEPS gives f in one
  // instruction, VSCALEFPS applies 2^n, and its zero-masking gives 0 below
  // -126 (no denormal P reaches the products; -inf lands there too).  NaN
  // lanes are kept (not-less-than, unordered: true) and come out NaN (the
  // NaN rule, README).
  // 10 instructions a vector where the exponent-field route took 17 (with a
  // degree-7 polynomial): the fused softmax stage of a 256x256 bf16 tile went
  // 18.4 -> 13.1 us.  x up to 8 (the amx softmax's slack above a row's
  // running max) scales up the same way.
  static T exp2(T x) {
    const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m512 f = _mm512_reduce_ps(x, 0x08);  // x - round-to-nearest(x), exact (no precision exception)
    const __m512 n = _mm512_sub_ps(x, f);
    return _mm512_maskz_scalef_ps(normal, exp2_poly<Vec>(f), n);
  }
};

#define FA_HAVE_SIMD_CONVERT 1
inline void convert_f16(const std::uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
}
inline void convert_bf16(const std::uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
  for (; i < n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
}

}  // namespace fa::FA_KERNEL_NS
