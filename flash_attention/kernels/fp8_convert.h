// FP8 and int8 to fp32 (the 8-bit inputs and quantized K/V caches), a vector
// at a time.  FP8: eight values at a time with F16C, on the paths that have it
// (avx2, and the AVX-512 paths, which are built with AVX2 and F16C too).
// Both formats are re-read as fp16 bit patterns, which F16C widens exactly:
// e5m2 is an fp16's top byte; an e4m3 byte shifted into an fp16's exponent
// and mantissa fields is its value times 2^-8 (biases 7 and 15), so one
// exact multiplication by 256 follows, and its NaN code (S.1111.111), which
// that reading would take for 1.875 * 2^0, is set to NaN.  Included by
// kv_tiles.h inside the path's namespace when FA_HAVE_SIMD_CONVERT is set.
#pragma once

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstdint>

namespace fa::FA_KERNEL_NS {

template <DType DT>
inline __m256 fp8x8_to_f32(const std::uint8_t* src) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  if constexpr (DT == DType::kFP8E5M2) {
    return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
  } else {
    const __m128i magnitude = _mm_and_si128(w, _mm_set1_epi16(0x7f));
    const __m128i bits = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8),
                                      _mm_slli_epi16(magnitude, 7));
    const __m256 value = _mm256_mul_ps(_mm256_cvtph_ps(bits), _mm256_set1_ps(256.0f));
    const __m256 nan =
        _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(magnitude, _mm_set1_epi16(0x7f))));
    return _mm256_blendv_ps(value, _mm256_set1_ps(__builtin_nanf("")), nan);
  }
}

#if defined(__AVX512F__)
// 16 FP8 values as fp32, exactly (NaN kept): the pair path's packing.
template <DType DT>
inline __m512 fp8x16_to_f32(const std::uint8_t* src) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(fp8x8_to_f32<DT>(src)), fp8x8_to_f32<DT>(src + 8), 1);
}
#endif

// n (a multiple of 8) FP8 values to fp32.
template <DType DT>
inline void convert_fp8(const std::uint8_t* src, float* dst, int n) {
  for (int i = 0; i < n; i += 8) _mm256_storeu_ps(dst + i, fp8x8_to_f32<DT>(src + i));
}

// The row path's FP8 widening, in fewer instructions (decoding reads each
// K/V element once, so the widening is most of its work): the values times
// kFp8RowUnit<DT> (2^-8 for e4m3: its bits read as an fp16 without the
// multiplication by 256, which the row path folds into the score and
// output scales; 1 for e5m2), exact.  The byte lands in an fp16 lane's top
// half (an unpack with zero), which for e5m2 is its fp16 (NaN and Inf
// included); for e4m3 an arithmetic shift by one then puts the exponent
// and mantissa in fp16's fields and copies the sign into bit 14, which the
// mask clears.  e4m3's NaN code (S.1111.111) would read as 1.875 * 2^-8
// here: the row path finds it first, a tile at a time
// (e4m3_rows_have_nan), and widens a tile that holds one exactly
// (load_quantized_tile), so NaN still propagates.
template <DType DT>
inline constexpr float kFp8RowUnit = DT == DType::kFP8E4M3 ? 1.0f / 256.0f : 1.0f;

template <DType DT>
inline __m256 fp8x8_to_f32_row_unit(const std::uint8_t* src) {
  const __m128i w = _mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  if constexpr (DT == DType::kFP8E5M2) {
    return _mm256_cvtph_ps(w);
  } else {
    return _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(w, 1), _mm_set1_epi16(static_cast<short>(0xbf80))));
  }
}

// Whether any of `rows` rows of n bytes (a multiple of 8), `stride` bytes
// apart, holds e4m3's NaN code: 32 codes per compare, a tenth of the work
// of checking each value as it is widened.
inline bool e4m3_rows_have_nan(const std::uint8_t* p, std::int64_t stride, int rows, int n) {
#if defined(__AVX512BW__)
  // 64 codes per compare; the tail (n % 64, a multiple of 8) by a masked load.
  const __m512i top512 = _mm512_set1_epi8(static_cast<char>(0x80)), nan512 = _mm512_set1_epi8(static_cast<char>(0xff));
  const __mmask64 tail = n % 64 ? (__mmask64{1} << (n % 64)) - 1 : 0;
  __mmask64 found = 0;
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* row = p + r * stride;
    int i = 0;
    for (; i + 64 <= n; i += 64) found |= _mm512_cmpeq_epi8_mask(_mm512_or_si512(_mm512_loadu_si512(row + i), top512), nan512);
    if (tail) found |= _mm512_mask_cmpeq_epi8_mask(tail, _mm512_or_si512(_mm512_maskz_loadu_epi8(tail, row + i), top512), nan512);
  }
  return found != 0;
#else
  const __m256i top = _mm256_set1_epi8(static_cast<char>(0x80)), nan = _mm256_set1_epi8(static_cast<char>(0xff));
  __m256i any = _mm256_setzero_si256();
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* row = p + r * stride;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i));
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_or_si256(x, top), nan));
    }
    for (; i < n; i += 8) {  // (a 32-byte load here could reach past the tensor)
      const __m256i x = _mm256_inserti128_si256(_mm256_setzero_si256(),
                                                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i)), 0);
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_or_si256(x, top), nan));
    }
  }
  return !_mm256_testz_si256(any, any);
#endif
}

#if defined(__AVX512VBMI__)
// FP8 to bf16 through byte tables (the avx512bf16 and amx paths, which
// require AVX512_VBMI): every FP8 value, NaN, Inf and the subnormals
// included, is exactly a bf16 (e4m3's 4 exponent bits and e5m2's 5 fit in
// bf16's 8), so a 128-entry table of each magnitude code's bf16 replaces
// the arithmetic.  VPERMI2B looks up 64 codes at once in a 128-byte table
// held in two registers: one lookup for the bf16s' low bytes, one for
// their high bytes, into which the code's sign bit is merged; two unpacks
// then pair the bytes into words.  Five instructions widen 64 values, where
// the F16C route takes five for 16 and needs a separate scan for e4m3's NaN
// code.
// The low bytes (0-127) and high bytes (128-255) of the bf16s of
// value(0) .. value(127), each exactly a bf16 (the upper half of its fp32).
template <class Value>
inline std::array<std::uint8_t, 256> bf16_byte_tables(Value value) {
  std::array<std::uint8_t, 256> t{};
  for (int m = 0; m < 128; ++m) {
    const auto bits = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(value(m))) >> 16);
    t[m] = static_cast<std::uint8_t>(bits & 0xff);
    t[128 + m] = static_cast<std::uint8_t>(bits >> 8);
  }
  return t;
}

struct Fp8Bf16Table {
  __m512i lo0, lo1, hi0, hi1;  // low and high bytes of the bf16 of codes 0-63 and 64-127

  template <DType DT>
  static Fp8Bf16Table of() {
    static_assert(is_fp8(DT), "an FP8 format");
    alignas(64) static const std::array<std::uint8_t, 256> bytes = bf16_byte_tables([](int code) {
      const auto b = static_cast<std::uint8_t>(code);
      return DT == DType::kFP8E4M3 ? detail::fp8_e4m3_to_f32(b) : detail::fp8_e5m2_to_f32(b);  // exact: see above
    });
    return {_mm512_load_si512(bytes.data()), _mm512_load_si512(bytes.data() + 64),
            _mm512_load_si512(bytes.data() + 128), _mm512_load_si512(bytes.data() + 192)};
  }

  // 64 codes to the low bytes and the high bytes (sign included) of their
  // bf16s: byte i of each is code i's.
  void widen(__m512i codes, __m512i& lo, __m512i& hi) const {
    lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
    // hi | (codes & 0x80): the sign bit, which the lookup's 7-bit index drops.
    hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, codes, hi1), codes,
                                   _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);
  }

  // 64 codes to their bf16s in order: codes 0-31 in `first`, 32-63 in
  // `second`.  The unpacks pair bytes within 128-bit lanes, so one VPERMB
  // first puts the codes where those leave them in order: lane L's bytes
  // 0-7 are codes 8L to 8L + 7 (words 8L on of `first`), its bytes 8-15
  // codes 32 + 8L on (of `second`).
  static constexpr std::array<std::uint8_t, 64> kInOrder = [] {
    std::array<std::uint8_t, 64> o{};
    for (int lane = 0; lane < 4; ++lane) {
      for (int k = 0; k < 8; ++k) {
        o[16 * lane + k] = static_cast<std::uint8_t>(8 * lane + k);
        o[16 * lane + 8 + k] = static_cast<std::uint8_t>(32 + 8 * lane + k);
      }
    }
    return o;
  }();
  void widen_in_order(__m512i codes, __m512i& first, __m512i& second) const {
    __m512i lo, hi;
    widen(_mm512_permutexvar_epi8(_mm512_loadu_si512(kInOrder.data()), codes), lo, hi);
    first = _mm512_unpacklo_epi8(lo, hi);
    second = _mm512_unpackhi_epi8(lo, hi);
  }
};

// int8 to bf16 the same way (an int8 cache widened for the tile unit):
// every integer of int8's range is exactly a bf16, and as a bf16 it is its
// magnitude's with the sign bit set.  The magnitude (VPABSB) is 0-127 but
// for -128, whose 128 reads entry 0 of the 7-bit lookup: so entry 0 of the
// high bytes is 128's (0x43; the low bytes of both are 0), and zero codes
// take their high byte from the lookup's zero-masking.  Eight instructions
// for 64 values, against fourteen through fp32 (sign-extend, convert,
// round to pairs).
struct Int8Bf16Table {
  __m512i lo0, lo1, hi0, hi1;  // low and high bytes of the bf16 of magnitudes 0-63 and 64-127 (0: 128's high byte)

  static Int8Bf16Table make() {
    alignas(64) static const std::array<std::uint8_t, 256> bytes =
        bf16_byte_tables([](int m) { return m == 0 ? 128 : m; });
    return {_mm512_load_si512(bytes.data()), _mm512_load_si512(bytes.data() + 64),
            _mm512_load_si512(bytes.data() + 128), _mm512_load_si512(bytes.data() + 192)};
  }

  // 64 codes to their bf16s in order, as Fp8Bf16Table::widen_in_order.
  void widen_in_order(__m512i codes, __m512i& first, __m512i& second) const {
    const __m512i x = _mm512_permutexvar_epi8(_mm512_loadu_si512(Fp8Bf16Table::kInOrder.data()), codes);
    const __m512i magnitude = _mm512_abs_epi8(x);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, magnitude, lo1);
    __m512i hi = _mm512_maskz_permutex2var_epi8(_mm512_test_epi8_mask(x, x), hi0, magnitude, hi1);
    hi = _mm512_ternarylogic_epi32(hi, x, _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);  // | the sign
    first = _mm512_unpacklo_epi8(lo, hi);
    second = _mm512_unpackhi_epi8(lo, hi);
  }
};
#endif

// Vec::W values to fp32 in one vector: FP8 (times kFp8RowUnit), and int8
// (sign-extended to 32 bits, then converted exactly).
template <DType DT>
inline Vec::T fp8_vec_to_f32(const std::uint8_t* src) {
#if defined(__AVX512F__)
  // 16 bytes into the top halves of 16 fp16 lanes at once, then one 512-bit
  // widening (two 8-lane conversions and an insert cost twice the uops).
  const __m256i w = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))), 8);
  if constexpr (DT == DType::kFP8E5M2) {
    return _mm512_cvtph_ps(w);
  } else {
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(w, 1), _mm256_set1_epi16(static_cast<short>(0xbf80))));
  }
#else
  return fp8x8_to_f32_row_unit<DT>(src);
#endif
}
inline Vec::T i8_vec_to_f32(const std::int8_t* src) {
#if defined(__AVX512F__)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
#else
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src))));
#endif
}

}  // namespace fa::FA_KERNEL_NS
