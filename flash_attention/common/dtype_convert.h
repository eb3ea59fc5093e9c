// Scalar conversions between fp32 and the 16-bit storage types.
//
// Written with integer operations only, so they are exact on every x86-64 CPU
// without F16C or AVX512_BF16, and branch-light so loops over them vectorize.
// Rounding is to nearest, ties to even; Inf stays Inf and NaN stays NaN (a
// signalling NaN comes back quiet, never as Inf).
// The functions are static: this header is included by translation units
// compiled with different instruction-set flags, and a shared (COMDAT) copy
// built with AVX-512 must never be picked for baseline code.
#pragma once

#include <bit>
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

// Loads element `i` of a buffer of `dtype` as fp32.
static inline float load_as_f32(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  }
  return 0.0f;
}

static inline void store_from_f32(void* base, DType dtype, std::int64_t i, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[i] = value; break;
    case DType::kF16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(value); break;
    case DType::kBF16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(value); break;
  }
}

}  // namespace fa::detail
