// 8-lane fp32 vector policy on AVX2 + FMA (+ F16C for fp16 loads).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "exp2_poly.h"

namespace fa::FA_KERNEL_NS {

struct Vec {
  using T = __m256;
  static constexpr int W = 8;
  static constexpr int kRows = 4;  // 4 x 2 accumulators + 2 loads + 1 broadcast of 16 registers
  static constexpr int kVecs = 2;
  static constexpr const char* kName = "avx2";

  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T abs(T a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static T copysign(T mag, T sign) { return _mm256_or_ps(abs(mag), _mm256_and_ps(_mm256_set1_ps(-0.0f), sign)); }
  static float reduce_add(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // out[0..3] = the sums of a, b, c and d (one transposing reduction).
  static void reduce_add4(T a, T b, T c, T d, float* out) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
  }
  static float reduce_max(T v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // 16-bit storage widened to fp32, W elements.
  static T load_f16(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static T load_bf16(const std::uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // 2W bf16 values loaded as W 32-bit pairs and widened in two halves, the
  // even-indexed values (low halves shifted up) and the odd-indexed ones
  // (high halves, the low ones masked off): one integer operation for each
  // W values, where load_bf16's widening load and shift take two.  The row
  // path's FMA products run so on bf16 K/V (row_scores_split).
  static constexpr bool kSplitBf16 = true;
  static T load_pairs(const std::uint16_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static T bf16_even(T pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(pairs), 16)); }
  static T bf16_odd(T pairs) { return _mm256_and_ps(pairs, _mm256_castsi256_ps(_mm256_set1_epi32(-65536))); }
  static T zero_if_neg_inf(T m) {
    return _mm256_andnot_ps(_mm256_cmp_ps(m, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ), m);
  }
  static T exp2(T x) {
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);  // -inf too; NaN is not
    __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
    xc = _mm256_min_ps(xc, _mm256_setzero_ps());
    const __m256 round = _mm256_set1_ps(12582912.0f);
    const __m256 shifted = _mm256_add_ps(xc, round);
    const __m256 n = _mm256_sub_ps(shifted, round);
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(0x4b400000));
    const __m256 f = _mm256_sub_ps(xc, n);
    const __m256 p = exp2_poly<Vec>(f);
    const __m256 scaled =
        _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(ni, 23)));
    // NaN in, NaN out: a NaN score reaches the row's sum and output instead
    // of passing for a masked key (the NaN rule, README).
    return _mm256_or_ps(_mm256_andnot_ps(underflow, scaled), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
};

// n (a multiple of 8) fp16 or bf16 values to fp32, eight at a time.
#define FA_HAVE_SIMD_CONVERT 1
inline void convert_f16(const std::uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
}
inline void convert_bf16(const std::uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
}

}  // namespace fa::FA_KERNEL_NS
