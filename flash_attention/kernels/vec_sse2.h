// 4-lane fp32 vector policy on SSE2: the baseline every x86-64 CPU has.
// No FMA here, so fmadd is a multiply and an add (two roundings).
#pragma once

#include <emmintrin.h>

#include <cstdint>

#include "exp2_poly.h"

namespace fa::FA_KERNEL_NS {

struct Vec {
  using T = __m128;
  static constexpr int W = 4;
  static constexpr int kRows = 4;   // rows per microkernel block
  static constexpr int kVecs = 2;   // vectors per row in a block
  static constexpr const char* kName = "generic";

  static T zero() { return _mm_setzero_ps(); }
  static T set1(float x) { return _mm_set1_ps(x); }
  static T load(const float* p) { return _mm_loadu_ps(p); }
  static void store(float* p, T v) { _mm_storeu_ps(p, v); }
  static T fmadd(T a, T b, T c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
  static T mul(T a, T b) { return _mm_mul_ps(a, b); }
  static T add(T a, T b) { return _mm_add_ps(a, b); }
  static T sub(T a, T b) { return _mm_sub_ps(a, b); }
  static T max(T a, T b) { return _mm_max_ps(a, b); }
  static T min(T a, T b) { return _mm_min_ps(a, b); }
  static T div(T a, T b) { return _mm_div_ps(a, b); }
  static T abs(T a) { return _mm_andnot_ps(_mm_set1_ps(-0.0f), a); }
  // |mag| with the sign of `sign`.
  static T copysign(T mag, T sign) { return _mm_or_ps(abs(mag), _mm_and_ps(_mm_set1_ps(-0.0f), sign)); }
  static float reduce_add(T v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
  }
  // out[0..3] = the sums of a, b, c and d (one transposing reduction).
  static void reduce_add4(T a, T b, T c, T d, float* out) {
    _MM_TRANSPOSE4_PS(a, b, c, d);
    _mm_storeu_ps(out, _mm_add_ps(_mm_add_ps(a, b), _mm_add_ps(c, d)));
  }
  static float reduce_max(T v) {
    v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    v = _mm_max_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
  }
  // Lanes equal to -inf become 0 (the all-masked row's stand-in maximum).
  // bf16 pairs split into even and odd values (see vec_avx2.h); this path's
  // row products widen in buffers, not in registers (kSplitBf16 false).
  static constexpr bool kSplitBf16 = false;
  static T load_pairs(const std::uint16_t* p) { return _mm_loadu_ps(reinterpret_cast<const float*>(p)); }
  static T bf16_even(T pairs) { return _mm_castsi128_ps(_mm_slli_epi32(_mm_castps_si128(pairs), 16)); }
  static T bf16_odd(T pairs) { return _mm_and_ps(pairs, _mm_castsi128_ps(_mm_set1_epi32(-65536))); }
  static T zero_if_neg_inf(T m) {
    return _mm_andnot_ps(_mm_cmpeq_ps(m, _mm_set1_ps(-__builtin_inff())), m);
  }
  static T exp2(T x) {
    const __m128 underflow = _mm_cmplt_ps(x, _mm_set1_ps(-126.0f));  // -inf too; NaN is not, see below
    __m128 xc = _mm_max_ps(x, _mm_set1_ps(-126.0f));
    xc = _mm_min_ps(xc, _mm_setzero_ps());
    const __m128 round = _mm_set1_ps(12582912.0f);
    const __m128 shifted = _mm_add_ps(xc, round);
    const __m128 n = _mm_sub_ps(shifted, round);
    const __m128i ni = _mm_sub_epi32(_mm_castps_si128(shifted), _mm_set1_epi32(0x4b400000));
    const __m128 f = _mm_sub_ps(xc, n);
    const __m128 p = exp2_poly<Vec>(f);
    const __m128 scaled = _mm_castsi128_ps(_mm_add_epi32(_mm_castps_si128(p), _mm_slli_epi32(ni, 23)));
    // NaN in, NaN out: a NaN score reaches the row's sum and output instead
    // of passing for a masked key (the NaN rule, README).
    return _mm_or_ps(_mm_andnot_ps(underflow, scaled), _mm_cmpunord_ps(x, x));
  }
};

}  // namespace fa::FA_KERNEL_NS
