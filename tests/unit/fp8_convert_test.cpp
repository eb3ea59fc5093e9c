// FP8 conversions (OCP e4m3fn and e5m2) against their definitions: every
// code decoded, every code and every midpoint between neighbours encoded,
// overflow and NaN; and each kernel path's widening of K/V rows, which reads
// FP8 through fp16 bit patterns, against the scalar decoding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/dtype_convert.h"
#include "flash_attention/testing.h"

namespace {

using fa::detail::f32_to_fp8_e4m3;
using fa::detail::f32_to_fp8_e5m2;
using fa::detail::fp8_e4m3_to_f32;
using fa::detail::fp8_e5m2_to_f32;

// The value of a code by the format's definition, in double.
double defined_value(std::uint8_t code, int man_bits, int bias) {
  const int exp = (code & 0x7f) >> man_bits, man = code & ((1 << man_bits) - 1);
  const double mag = exp == 0 ? std::ldexp(man, 1 - bias - man_bits) : std::ldexp((1 << man_bits) + man, exp - bias - man_bits);
  return (code & 0x80) ? -mag : mag;
}

TEST(Fp8, E4m3DecodesEveryCodeAsDefined) {
  for (int c = 0; c < 256; ++c) {
    const float got = fp8_e4m3_to_f32(static_cast<std::uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(got)) << c;  // e4m3fn: S.1111.111 is NaN, there is no Inf
      continue;
    }
    EXPECT_EQ(double(got), defined_value(static_cast<std::uint8_t>(c), 3, 7)) << c;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, E5m2DecodesEveryCodeAsDefined) {
  for (int c = 0; c < 256; ++c) {
    const float got = fp8_e5m2_to_f32(static_cast<std::uint8_t>(c));
    const int exp = (c & 0x7f) >> 2;
    if (exp == 31) {
      if ((c & 3) == 0) {
        EXPECT_TRUE(std::isinf(got) && std::signbit(got) == bool(c & 0x80)) << c;
      } else {
        EXPECT_TRUE(std::isnan(got)) << c;
      }
      continue;
    }
    EXPECT_EQ(double(got), defined_value(static_cast<std::uint8_t>(c), 2, 15)) << c;
  }
  EXPECT_EQ(fp8_e5m2_to_f32(0x7b), 57344.0f);
}

// Encoding: every finite code round-trips; a value between two neighbours
// goes to the nearer, a midpoint to the one with the even code.
template <class Encode, class Decode>
void check_rounding(Encode encode, Decode decode, std::uint8_t max_code) {
  for (int c = 0; c <= max_code; ++c) {
    for (int sign : {0, 0x80}) {
      const std::uint8_t code = static_cast<std::uint8_t>(c | sign);
      EXPECT_EQ(encode(decode(code)), code) << int(code);
    }
  }
  for (int c = 0; c < max_code; ++c) {
    const float lo = decode(static_cast<std::uint8_t>(c)), hi = decode(static_cast<std::uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact in fp32
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(encode(mid), even) << "midpoint of " << c << " and " << c + 1;
    EXPECT_EQ(encode(std::nextafter(mid, lo)), c);
    EXPECT_EQ(encode(std::nextafter(mid, hi)), c + 1);
    EXPECT_EQ(encode(-std::nextafter(mid, hi)), (c + 1) | 0x80);
  }
}

TEST(Fp8, E4m3RoundsToNearestEvenAndSaturates) {
  check_rounding(f32_to_fp8_e4m3, fp8_e4m3_to_f32, 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e6f), 0x7e);  // no Inf in e4m3fn: the largest finite
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
}

TEST(Fp8, E5m2RoundsToNearestEvenAndOverflowsToInf) {
  check_rounding(f32_to_fp8_e5m2, fp8_e5m2_to_f32, 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2(61440.0f), 0x7c);  // halfway to the next binade rounds to Inf (even)
  EXPECT_EQ(f32_to_fp8_e5m2(61439.0f), 0x7b);
  EXPECT_EQ(f32_to_fp8_e5m2(-1e9f), 0xfc);
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(std::numeric_limits<float>::quiet_NaN()))));
}

// Every 8-bit code (FP8 inputs and caches, int8 caches), through both
// widenings of each path: the tile loops' into buffers and the row path's
// in registers (FP8 there in fewer instructions, e4m3 in units of 2^-8).
class Fp8Widening : public ::testing::TestWithParam<std::tuple<fa::Isa, fa::DType, bool>> {};

TEST_P(Fp8Widening, EveryCodeAsTheScalarDecoding) {
  const auto [isa, dtype, row_path] = GetParam();
  std::vector<std::uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<std::uint8_t>(c);
  std::vector<float> out(256);
  if (!fa::testing::vector_widen(isa, dtype, codes.data(), out.data(), 256, row_path)) {
    GTEST_SKIP() << "path not available";
  }
  for (int c = 0; c < 256; ++c) {
    const float want = dtype == fa::DType::kFP8E4M3   ? fp8_e4m3_to_f32(codes[c])
                       : dtype == fa::DType::kFP8E5M2 ? fp8_e5m2_to_f32(codes[c])
                                                      : static_cast<float>(static_cast<std::int8_t>(codes[c]));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[c])) << c;
    } else {
      EXPECT_EQ(out[c], want) << c;
      EXPECT_EQ(std::signbit(out[c]), std::signbit(want)) << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, Fp8Widening,
                         ::testing::Combine(::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512,
                                                              fa::Isa::kAvx512Bf16, fa::Isa::kAmx),
                                            ::testing::Values(fa::DType::kFP8E4M3, fa::DType::kFP8E5M2, fa::DType::kI8),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) +
                                  (std::get<2>(info.param) ? "_row_path" : "_tile_loops");
                         });

// The row path's FP8 widening to bf16 through byte tables (the avx512bf16
// and amx paths), every code, as K and as V's key pairs: each is exactly
// the scalar decoding, sign and NaN included, in its place.
class Fp8PairWidening : public ::testing::TestWithParam<std::tuple<fa::Isa, fa::DType, bool>> {};

TEST_P(Fp8PairWidening, EveryCodeAsTheScalarDecoding) {
  const auto [isa, dtype, value_pairs] = GetParam();
  std::vector<std::uint8_t> codes(512);
  // Every code twice, in two places (in order, then permuted).
  for (int i = 0; i < 512; ++i) codes[i] = static_cast<std::uint8_t>(i < 256 ? i : (i * 37 + 11) % 256);
  std::vector<float> out(512);
  if (!fa::testing::vector_widen_pairs(isa, dtype, codes.data(), out.data(), 512, value_pairs)) {
    GTEST_SKIP() << "no FP8 byte tables on this path";
  }
  for (int i = 0; i < 512; ++i) {
    const float want = dtype == fa::DType::kFP8E4M3 ? fp8_e4m3_to_f32(codes[i]) : fp8_e5m2_to_f32(codes[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i])) << "code " << int(codes[i]) << " at " << i;
    } else {
      EXPECT_EQ(out[i], want) << "code " << int(codes[i]) << " at " << i;
      EXPECT_EQ(std::signbit(out[i]), std::signbit(want)) << "code " << int(codes[i]) << " at " << i;
    }
  }
}

// An int8 cache's widening to bf16 rows for the tile unit (the amx path;
// byte tables where AVX512_VBMI is): every code exactly, -128 (the one
// magnitude past the 7-bit lookup) and 0 (the zero-masked high byte)
// included, in its place.
class Int8RowWidening : public ::testing::TestWithParam<fa::Isa> {};

TEST_P(Int8RowWidening, EveryCodeExactly) {
  std::vector<std::uint8_t> codes(512);
  for (int i = 0; i < 512; ++i) codes[i] = static_cast<std::uint8_t>(i < 256 ? i : (i * 37 + 11) % 256);
  std::vector<float> out(512);
  if (!fa::testing::vector_widen_pairs(GetParam(), fa::DType::kI8, codes.data(), out.data(), 512, false)) {
    GTEST_SKIP() << "no int8 byte tables on this path";
  }
  for (int i = 0; i < 512; ++i) {
    const float want = static_cast<float>(static_cast<std::int8_t>(codes[i]));
    EXPECT_EQ(out[i], want) << "code " << int(codes[i]) << " at " << i;
    EXPECT_FALSE(std::signbit(out[i]) && want == 0.0f) << "zero widened to -0 at " << i;
  }
  EXPECT_FALSE(fa::testing::vector_widen_pairs(GetParam(), fa::DType::kI8, codes.data(), out.data(), 512, true))
      << "int8 has no V-pair widening";
}

INSTANTIATE_TEST_SUITE_P(AllPaths, Int8RowWidening,
                         ::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16,
                                           fa::Isa::kAmx),
                         [](const auto& info) { return std::string(fa::isa_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(AllPaths, Fp8PairWidening,
                         ::testing::Combine(::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512,
                                                              fa::Isa::kAvx512Bf16, fa::Isa::kAmx),
                                            ::testing::Values(fa::DType::kFP8E4M3, fa::DType::kFP8E5M2),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) +
                                  (std::get<2>(info.param) ? "_as_v_pairs" : "_as_k");
                         });

}  // namespace
