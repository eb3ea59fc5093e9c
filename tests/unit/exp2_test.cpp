#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/exp2.h"

namespace {

std::int64_t ulp_distance(float a, float b) {
  const auto ia = std::bit_cast<std::int32_t>(a), ib = std::bit_cast<std::int32_t>(b);
  return std::abs(static_cast<std::int64_t>(ia) - ib);
}

TEST(Exp2Softmax, WithinTwoUlpOverTheSoftmaxDomain) {
  std::int64_t worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -126.0f * static_cast<float>(i) / 2000000.0f;
    const float want = static_cast<float>(std::exp2(static_cast<double>(x)));
    worst = std::max(worst, ulp_distance(fa::detail::exp2_softmax(x), want));
  }
  EXPECT_LE(worst, 2);
}

TEST(Exp2Softmax, ExactAtIntegersAndZero) {
  for (int n = 0; n >= -126; --n) EXPECT_EQ(fa::detail::exp2_softmax(float(n)), std::ldexp(1.0f, n)) << n;
}

TEST(Exp2Softmax, UnderflowAndMinusInfinityGiveZero) {
  EXPECT_EQ(fa::detail::exp2_softmax(-126.5f), 0.0f);
  EXPECT_EQ(fa::detail::exp2_softmax(-1e30f), 0.0f);
  EXPECT_EQ(fa::detail::exp2_softmax(-std::numeric_limits<float>::infinity()), 0.0f);
}

}  // namespace
