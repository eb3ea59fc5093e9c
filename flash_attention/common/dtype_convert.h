// Scalar conversions between fp32 and the 16-bit and 8-bit storage types.
//
// Written with integer operations (and exact power-of-two scalings) only, so
// they are exact on every x86-64 CPU without F16C or AVX512_BF16, and
// branch-light so loops over them vectorize.
// Rounding is to nearest, ties to even; Inf stays Inf and NaN stays NaN (a
// signalling NaN comes back quiet, never as Inf).
// The functions are static: this header is included by translation units
// compiled with different instruction-set flags, and a shared (COMDAT) copy
// built with AVX-512 must never be picked for baseline code.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

static inline float bf16_to_f32(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

static inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and payload top, force quiet
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit.  Overflow of
  // a large finite value correctly rounds up to Inf.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

static inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) {  // Inf or NaN
    return std::bit_cast<float>(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    // Zero or subnormal: value = man * 2^-24, exact in fp32.
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<std::uint16_t>((abs >> 13) & 0x3ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is fp16 subnormal or zero.  Adding 0.5 (as fp32) puts the
    // fp16-subnormal bits at the bottom of the mantissa, and the fp32 adder
    // performs the round-to-nearest-even for us.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return sign | static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
  std::uint32_t r = abs - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | static_cast<std::uint16_t>(r >> 13);
}

// FP8 (OCP 8-bit floats).  e4m3fn: bias 7, no Inf, S.1111.111 is NaN, the
// largest finite 448.  e5m2: bias 15, the top byte of an fp16, so Inf and
// NaN as fp16's.
static inline float fp8_e4m3_to_f32(std::uint8_t b) {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
  const std::uint32_t exp = (b >> 3) & 0xfu, man = b & 0x7u;
  if (exp == 0xfu && man == 0x7u) return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exp == 0) {  // zero or subnormal: man * 2^-9
    const float mag = static_cast<float>(man) * 0.001953125f;
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (man << 20));
}
static inline float fp8_e5m2_to_f32(std::uint8_t b) { return f16_to_f32(static_cast<std::uint16_t>(b << 8)); }

// fp32 to an FP8 format with kMan mantissa bits and exponent bias kBias,
// round to nearest even.  Beyond the largest finite value: e4m3fn saturates
// to +-448 (it has no Inf; quantizers clamp), e5m2 becomes +-Inf.  NaN stays
// NaN.  Each step is exact: scaling by powers of two, rounding an integer-
// valued float with nearbyint (the default mode: nearest even).
template <int kMan, int kBias, bool kSaturate>
static inline std::uint8_t f32_to_fp8(float f) {
  const std::uint8_t sign = std::signbit(f) ? 0x80u : 0u;
  constexpr std::uint8_t kNaN = kSaturate ? 0x7fu : 0x7eu;
  constexpr int kMaxCode = kSaturate ? 0x7e : 0x7b;  // largest finite magnitude's code
  if (std::isnan(f)) return sign | kNaN;
  if (std::isinf(f)) return sign | static_cast<std::uint8_t>(kSaturate ? kMaxCode : 0x7c);
  const float a = std::fabs(f);
  constexpr int kMinExp = 1 - kBias;  // smallest normal exponent
  int e = 0;
  std::frexp(a, &e);
  e -= 1;  // a = m * 2^e, 1 <= m < 2
  int code;
  if (a == 0.0f) {
    code = 0;
  } else if (e < kMinExp) {  // subnormal: multiples of 2^(kMinExp - kMan)
    const int q = static_cast<int>(std::nearbyint(std::ldexp(a, kMan - kMinExp)));
    code = q;  // q == 2^kMan is the smallest normal's code, as it should be
  } else {
    int q = static_cast<int>(std::nearbyint(std::ldexp(a, kMan - e)));  // in [2^kMan, 2^(kMan+1)]
    if (q == (1 << (kMan + 1))) {
      q >>= 1;
      ++e;
    }
    const long long c = (static_cast<long long>(e + kBias) << kMan) | (q - (1 << kMan));
    code = c > kMaxCode ? kMaxCode + 1 : static_cast<int>(c);
  }
  if (code > kMaxCode) return sign | static_cast<std::uint8_t>(kSaturate ? kMaxCode : 0x7c);  // 448, or Inf
  return sign | static_cast<std::uint8_t>(code);
}
static inline std::uint8_t f32_to_fp8_e4m3(float f) { return f32_to_fp8<3, 7, true>(f); }
static inline std::uint8_t f32_to_fp8_e5m2(float f) { return f32_to_fp8<2, 15, false>(f); }

// int8 of a quantized cache: rounded to nearest even, saturated to the
// symmetric range [-127, 127] (NaN to 0: an int8 has no NaN).
static inline std::int8_t f32_to_i8(float f) {
  if (!(f == f)) return 0;
  const float c = f < -127.0f ? -127.0f : f > 127.0f ? 127.0f : f;
  return static_cast<std::int8_t>(__builtin_rintf(c));  // the default rounding mode: to nearest even
}

// Loads element `i` of a buffer of `dtype` as fp32.
static inline float load_as_f32(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kFP8E4M3: return fp8_e4m3_to_f32(static_cast<const std::uint8_t*>(base)[i]);
    case DType::kFP8E5M2: return fp8_e5m2_to_f32(static_cast<const std::uint8_t*>(base)[i]);
    case DType::kI8: return static_cast<float>(static_cast<const std::int8_t*>(base)[i]);
  }
  return 0.0f;
}

static inline void store_from_f32(void* base, DType dtype, std::int64_t i, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[i] = value; break;
    case DType::kF16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(value); break;
    case DType::kBF16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(value); break;
    case DType::kFP8E4M3: static_cast<std::uint8_t*>(base)[i] = f32_to_fp8_e4m3(value); break;
    case DType::kFP8E5M2: static_cast<std::uint8_t*>(base)[i] = f32_to_fp8_e5m2(value); break;
    case DType::kI8: static_cast<std::int8_t*>(base)[i] = f32_to_i8(value); break;
  }
}

}  // namespace fa::detail
