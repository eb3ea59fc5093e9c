// fp16 / bf16 conversions against an independent oracle: the nearest
// representable value found by search over every finite 16-bit pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype_convert.h"

namespace {

using fa::detail::bf16_to_f32;
using fa::detail::f16_to_f32;
using fa::detail::f32_to_bf16;
using fa::detail::f32_to_f16;

// Round-to-nearest-even oracle over a table of (value, bits) for all finite
// non-negative patterns of a 16-bit format, sorted by value.
struct Oracle {
  std::vector<std::pair<double, std::uint16_t>> table;
  double max_finite;
  double overflow_threshold;  // halfway between max_finite and the next step

  std::uint16_t round(float x) const {
    const double a = std::abs(static_cast<double>(x));
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (a >= overflow_threshold) return sign | inf_bits;
    auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, std::uint16_t{0}));
    if (it == table.end()) return sign | table.back().second;  // above max_finite, below the threshold
    if (it->first == a || it == table.begin()) return sign | it->second;
    auto lo = it - 1;
    const double dlo = a - lo->first, dhi = it->first - a;
    if (dlo < dhi) return sign | lo->second;
    if (dhi < dlo) return sign | it->second;
    return sign | ((lo->second & 1) == 0 ? lo->second : it->second);  // tie: even mantissa
  }
  std::uint16_t inf_bits;
};

Oracle make_oracle(float (*decode)(std::uint16_t), std::uint16_t inf_bits) {
  Oracle o;
  o.inf_bits = inf_bits;
  for (std::uint32_t bits = 0; bits < inf_bits; ++bits) {
    o.table.push_back({decode(static_cast<std::uint16_t>(bits)), static_cast<std::uint16_t>(bits)});
  }
  o.max_finite = o.table.back().first;
  const double step = o.table.back().first - o.table[o.table.size() - 2].first;
  o.overflow_threshold = o.max_finite + step / 2;
  return o;
}

TEST(DtypeConvert, F16RoundTripsEveryPattern) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = f16_to_f32(h);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
      EXPECT_TRUE(std::isnan(f)) << bits;
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << bits;
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << "pattern " << bits;
  }
}

TEST(DtypeConvert, Bf16RoundTripsEveryPattern) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = bf16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << bits;
      continue;
    }
    EXPECT_EQ(f32_to_bf16(f), h) << "pattern " << bits;
  }
}

TEST(DtypeConvert, F16RoundsToNearestEvenOnRandomFloats) {
  const Oracle oracle = make_oracle(f16_to_f32, 0x7c00);
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 400000; ++i) {
    // Spread the exponents over fp16's whole range and a little beyond.
    const float mag = std::ldexp(1.0f + (any(rng) >> 9) * 0x1.0p-23f, static_cast<int>(any(rng) % 48) - 30);
    const float x = (any(rng) & 1) ? -mag : mag;
    ASSERT_EQ(f32_to_f16(x), oracle.round(x)) << "x=" << x;
  }
}

TEST(DtypeConvert, F16TiesGoToEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: rounds to 1 (even).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1.0p-11f), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9: rounds up.
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1.0p-11f), 0x3c02);
  // Smallest subnormal halfway case: 2^-25 rounds to 0, 3 * 2^-25 to 2 * 2^-24.
  EXPECT_EQ(f32_to_f16(0x1.0p-25f), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * 0x1.0p-25f), 0x0002);
  // 65520 is halfway between 65504 and the next step: rounds to Inf.
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
}

TEST(DtypeConvert, Bf16RoundsToNearestEvenOnRandomFloats) {
  const Oracle oracle = make_oracle(bf16_to_f32, 0x7f80);
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 400000; ++i) {
    const std::uint32_t u = any(rng);
    const float x = std::bit_cast<float>(u);
    if (std::isnan(x) || std::isinf(x)) continue;
    ASSERT_EQ(f32_to_bf16(x), oracle.round(x)) << "bits=" << u;
  }
}

TEST(DtypeConvert, SpecialValuesSurvive) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::numeric_limits<float>::signaling_NaN();
  EXPECT_EQ(f32_to_f16(inf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-inf), 0xfc00);
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80);
  for (float n : {nan, -nan, snan}) {
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(n))));
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(n))));
  }
  // A NaN whose payload sits only in the low bits must not become Inf.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(low_payload_nan))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(low_payload_nan))));
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

}  // namespace
