// Loads and stores of whole fp32 vectors (the path's `Vec`) from and to
// fp32, fp16 and bf16 memory, for the element-wise operators (the norms,
// RoPE, the gated linear units).  Included after a path's vec_<path>.h,
// inside its FA_KERNEL_NS, so each path compiles its own with its flags.
#pragma once

#include <cstdint>

#include "../common/dtype_convert.h"

namespace fa::FA_KERNEL_NS {

// One vector of dtype DT at p (element i), as fp32 and back:
// F16C and integer rounding on the AVX paths (the same bits as
// dtype_convert.h's scalar conversions: nearest even, NaN kept quiet; on
// avx512bf16 the bf16 store is VCVTNEPS2BF16, whose results below 2^-126
// flush to zero), scalar conversions on the generic path.
template <DType DT>
inline typename Vec::T load_vec(const void* p, std::int64_t i) {
#if defined(FA_HAVE_SIMD_CONVERT)
  if constexpr (DT == DType::kF16) return Vec::load_f16(static_cast<const std::uint16_t*>(p) + i);
  if constexpr (DT == DType::kBF16) return Vec::load_bf16(static_cast<const std::uint16_t*>(p) + i);
  if constexpr (DT == DType::kF32) return Vec::load(static_cast<const float*>(p) + i);
#else
  alignas(64) float tmp[Vec::W];
  for (int k = 0; k < Vec::W; ++k) tmp[k] = detail::load_as_f32(p, DT, i + k);
  return Vec::load(tmp);
#endif
}
inline typename Vec::T load_vec(const void* p, DType dtype, std::int64_t i) {
  return dtype == DType::kF16 ? load_vec<DType::kF16>(p, i) : dtype == DType::kBF16 ? load_vec<DType::kBF16>(p, i) : load_vec<DType::kF32>(p, i);
}

#if defined(__AVX512F__)
inline __m256i f32x16_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}
#elif defined(__AVX2__)
// Each lane rounded to bf16 (nearest even; NaN made quiet), the result in
// the lane's high half (the low half is what the rounding left there).
inline __m256i bf16_rounded_high(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  // NaN: |u| > 0x7f800000 as signed ints (both sides non-negative).
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), nan);
}
inline __m128i f32x8_to_bf16(__m256 v) {
  const __m256i bits = _mm256_srli_epi32(bf16_rounded_high(v), 16);
  const __m256i packed = _mm256_packus_epi32(bits, bits);  // within lanes: 0-3 4-7 of each half
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
// The same for lanes the caller knows are not NaN (infinities round to
// themselves): half the operations, where a row's outputs are known to be
// NaN-free from its sums (the norms).
inline __m256i bf16_rounded_high_not_nan(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}
// Two vectors of the even- and odd-indexed values of 16 consecutive bf16
// elements (Vec::bf16_even / bf16_odd of one load), rounded as store_vec
// rounds them and put back side by side as one 32-byte store: the even
// lanes' rounded bits shifted down, the odd ones' left in place, and no
// pack or permute is needed.  kNotNaN: no lane is NaN (the caller's word).
template <bool kNotNaN = false>
inline void store_bf16_split(void* p, std::int64_t i, __m256 even, __m256 odd, bool stream) {
  const __m256i e = kNotNaN ? bf16_rounded_high_not_nan(even) : bf16_rounded_high(even);
  const __m256i o = kNotNaN ? bf16_rounded_high_not_nan(odd) : bf16_rounded_high(odd);
  const __m256i pairs = _mm256_or_si256(_mm256_srli_epi32(e, 16), _mm256_and_si256(o, _mm256_set1_epi32(-65536)));
  auto* out = reinterpret_cast<__m256i*>(static_cast<std::uint16_t*>(p) + i);
  if (stream) _mm256_stream_si256(out, pairs); else _mm256_storeu_si256(out, pairs);
}
// The same for values that are bf16 already (their low halves zero):
// nothing to round.
inline void store_bf16_split_exact(void* p, std::int64_t i, __m256 even, __m256 odd, bool stream) {
  const __m256i pairs = _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(even), 16), _mm256_castps_si256(odd));
  auto* out = reinterpret_cast<__m256i*>(static_cast<std::uint16_t*>(p) + i);
  if (stream) _mm256_stream_si256(out, pairs); else _mm256_storeu_si256(out, pairs);
}
#endif

// Stores one vector at element i of y's dtype; `stream` writes around the
// caches (non-temporal, whole 64-byte lines only: the caller aligns).
template <DType dtype>
inline void store_vec(void* p, std::int64_t i, typename Vec::T v, bool stream) {
#if defined(__AVX512F__)
  if constexpr (dtype == DType::kF32) {
    float* out = static_cast<float*>(p) + i;
    if (stream) _mm512_stream_ps(out, v); else _mm512_storeu_ps(out, v);
  } else {
    __m256i h;
    if constexpr (dtype == DType::kF16) {
      h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
#if defined(__AVX512BF16__)
      // One VCVTNEPS2BF16 (nearest even; NaN quiet; results below 2^-126
      // flush to zero, the instruction's rule) where the integer rounding
      // above takes eight instructions and VPMOVDW, which bound the pass.
      h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#else
      h = f32x16_to_bf16(v);
#endif
    }
    auto* out = reinterpret_cast<__m256i*>(static_cast<std::uint16_t*>(p) + i);
    if (stream) _mm256_stream_si256(out, h); else _mm256_storeu_si256(out, h);
  }
#elif defined(__AVX2__)
  if constexpr (dtype == DType::kF32) {
    float* out = static_cast<float*>(p) + i;
    if (stream) _mm256_stream_ps(out, v); else _mm256_storeu_ps(out, v);
  } else {
    __m128i h;
    if constexpr (dtype == DType::kF16) h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); else h = f32x8_to_bf16(v);
    auto* out = reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(p) + i);
    if (stream) _mm_stream_si128(out, h); else _mm_storeu_si128(out, h);
  }
#else
  (void)stream;
  alignas(64) float tmp[Vec::W];
  Vec::store(tmp, v);
  for (int k = 0; k < Vec::W; ++k) detail::store_from_f32(p, dtype, i + k, tmp[k]);
#endif
}

// The value a vector takes stored in `dtype` and read back.
template <DType DT>
inline typename Vec::T round_vec(typename Vec::T v) {
  if constexpr (DT == DType::kF32) {
    return v;
  } else {
    alignas(64) std::uint16_t tmp[Vec::W];
    store_vec<DT>(tmp, 0, v, false);
    return load_vec<DT>(tmp, 0);
  }
}

}  // namespace fa::FA_KERNEL_NS
