// The softmax's vector exp2 on every kernel path this CPU can run.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "flash_attention/testing.h"

namespace {

std::int64_t ulp_distance(float a, float b) {
  const auto ia = std::bit_cast<std::int32_t>(a), ib = std::bit_cast<std::int32_t>(b);
  return std::abs(static_cast<std::int64_t>(ia) - ib);
}

class Exp2 : public ::testing::TestWithParam<fa::Isa> {
 protected:
  void SetUp() override {
    if (!fa::isa_available(GetParam())) GTEST_SKIP() << "path not available on this CPU/build";
  }
  std::vector<float> run(const std::vector<float>& in) {
    std::vector<float> out(in.size());
    EXPECT_TRUE(fa::testing::vector_exp2(GetParam(), in.data(), out.data(), static_cast<int>(in.size())));
    return out;
  }
};

TEST_P(Exp2, WithinOneUlpOverTheSoftmaxDomain) {
  std::vector<float> in(2000001);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = -126.0f * static_cast<float>(i) / 2000000.0f;
  const std::vector<float> out = run(in);
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    worst = std::max(worst, ulp_distance(out[i], static_cast<float>(std::exp2(static_cast<double>(in[i])))));
  }
  EXPECT_LE(worst, 1);
}

// The amx path's softmax keeps a row's running max while scores exceed it
// by up to 8 (log2 units), so its exp2 (the AVX-512 one) also sees (0, 8].
class Exp2AboveZero : public Exp2 {};

TEST_P(Exp2AboveZero, WithinOneUlp) {
  std::vector<float> in(800001);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = 8.0f * static_cast<float>(i) / 800000.0f;
  const std::vector<float> out = run(in);
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    worst = std::max(worst, ulp_distance(out[i], static_cast<float>(std::exp2(static_cast<double>(in[i])))));
  }
  EXPECT_LE(worst, 1);
}

TEST_P(Exp2, ExactAtIntegers) {
  std::vector<float> in;
  for (int n = 0; n >= -126; --n) in.push_back(static_cast<float>(n));
  const std::vector<float> out = run(in);
  for (std::size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], std::ldexp(1.0f, -static_cast<int>(i)));
}

TEST_P(Exp2, UnderflowAndMinusInfinityGiveZero) {
  const std::vector<float> out = run({-126.5f, -1e30f, -std::numeric_limits<float>::infinity(), -200.0f, -127.0f});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// NaN stays NaN (a NaN score must reach its row, not pass for a masked key),
// in every lane position and beside ordinary lanes.
TEST_P(Exp2, NanGivesNan) {
  std::vector<float> in(19, -1.0f);
  for (std::size_t i = 0; i < in.size(); i += 3) in[i] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> out = run(in);
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (i % 3 == 0) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
    } else {
      EXPECT_EQ(out[i], 0.5f) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Exp2, ::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16, fa::Isa::kAmx),
                         [](const auto& info) { return std::string(fa::isa_name(info.param)); });
INSTANTIATE_TEST_SUITE_P(Paths, Exp2AboveZero, ::testing::Values(fa::Isa::kAvx512, fa::Isa::kAvx512Bf16, fa::Isa::kAmx),
                         [](const auto& info) { return std::string(fa::isa_name(info.param)); });

}  // namespace
