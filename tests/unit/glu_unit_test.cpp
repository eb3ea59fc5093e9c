// The gated linear units: the reference against published values of each
// activation, every kernel path against the reference over vector tails
// and far tails, the split order bit for bit, NaN kept to its element, and
// the one-line refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "glu_case.h"

namespace {

using fa::DType;
using fa::GluKind;
using fa::cli::GluCase;

// act(g) through the reference, with the up half 1.
double reference_activation(GluKind kind, float g) {
  std::vector<float> x = {g, 1.0f};
  fa::GluParams p;
  p.kind = kind;
  fa::GluTensors t;
  t.x = {x.data(), DType::kF32, 1, 2, 0};
  double y = 0;
  EXPECT_TRUE(fa::glu_reference(p, t, &y).ok());
  return y;
}

TEST(GluReference, MatchesPublishedValues) {
  // SiLU(1) = 1 / (1 + e^-1); GELU(1) = Phi(1); the tanh form's GELU(1); ReLU.
  EXPECT_NEAR(reference_activation(GluKind::kSwiGlu, 1.0f), 0.7310585786300049, 1e-15);
  EXPECT_NEAR(reference_activation(GluKind::kGeGluErf, 1.0f), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(reference_activation(GluKind::kGeGluTanh, 1.0f), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(reference_activation(GluKind::kGeGluErf, -3.0f), -3.0 * 0.0013498980316301, 1e-15);
  EXPECT_EQ(reference_activation(GluKind::kReGlu, -2.0f), 0.0);
  EXPECT_EQ(reference_activation(GluKind::kReGlu, 2.5f), 2.5);
  // The far negative tail keeps its value (no 1 + erf cancelling to 0).
  EXPECT_NEAR(reference_activation(GluKind::kGeGluErf, -10.0f) / (-10.0 * 7.619853024160527e-24), 1.0, 1e-9);
}

class GluPaths : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, GluKind>> {
 protected:
  void SetUp() override {
    fa::GluParams p;
    p.isa = isa();
    fa::Isa chosen;
    if (!fa::glu_isa(p, &chosen).ok()) GTEST_SKIP() << fa::isa_name(isa()) << " not available";
  }
  fa::Isa isa() const { return std::get<0>(GetParam()); }
  GluCase base(std::int64_t rows, std::int64_t width) const {
    GluCase c;
    c.isa = isa();
    c.dtype = std::get<1>(GetParam());
    c.params.kind = std::get<2>(GetParam());
    c.rows = rows;
    c.width = width;
    return c;
  }
};

// Widths 1 to 40 (every vector tail of every path) and inputs of scale 12,
// far into both tails of every activation.
TEST_P(GluPaths, TailsOfVectorsAndOfActivations) {
  for (std::int64_t width = 1; width <= 40; ++width) {
    GluCase c = base(3, width);
    c.scale = width % 2 ? 12.0 : 3.0;
    c.out_dtype = width % 3 == 0 ? DType::kF32 : std::get<1>(GetParam());
    c.seed = 100 + static_cast<std::uint64_t>(width);
    fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
    ASSERT_TRUE(fa::glu_forward(fa::cli::glu_params(c), b.tensors).ok());
    const fa::cli::GluCheck r = fa::cli::check_glu(c, b);
    EXPECT_TRUE(r.pass) << fa::cli::describe(c) << ": worst " << r.worst_share << ", " << r.mismatches << " past, nonfinite " << r.nonfinite;
  }
}

TEST_P(GluPaths, UpFirstIsGateFirstWithHalvesSwapped) {
  GluCase c = base(5, 70);
  fa::cli::GluBuffers a = fa::cli::make_glu_buffers(c);
  GluCase swapped = c;
  swapped.params.split = fa::GluSplit::kUpFirst;
  fa::cli::GluBuffers b = fa::cli::make_glu_buffers(swapped);
  const std::size_t half = static_cast<std::size_t>(70) * fa::dtype_size(c.dtype);
  for (std::int64_t r = 0; r < 5; ++r) {  // b's rows as [u, g] from a's [g, u]
    char* dst = static_cast<char*>(b.x.data()) + r * 2 * half;
    const char* src = static_cast<const char*>(a.x.data()) + r * 2 * half;
    std::memcpy(dst, src + half, half);
    std::memcpy(dst + half, src, half);
  }
  ASSERT_TRUE(fa::glu_forward(fa::cli::glu_params(c), a.tensors).ok());
  ASSERT_TRUE(fa::glu_forward(fa::cli::glu_params(swapped), b.tensors).ok());
  EXPECT_EQ(std::memcmp(a.y.data(), b.y.data(), static_cast<std::size_t>(5 * 70) * fa::dtype_size(c.dtype)), 0);
}

// Gates on a 1/64 grid over [-17, 17] and one fp32 step either side of
// every integer: every interval of the AVX-512 paths' table for Phi and its
// edges, and past its end (|g| > 15, held to 15), with the up half 1.
TEST_P(GluPaths, GatesAcrossEveryIntervalAndEdge) {
  std::vector<float> gates;
  for (int i = -17 * 64; i <= 17 * 64; ++i) gates.push_back(static_cast<float>(i) / 64.0f);
  for (int k = -17; k <= 17; ++k) {
    gates.push_back(std::nextafter(static_cast<float>(k), -100.0f));
    gates.push_back(std::nextafter(static_cast<float>(k), 100.0f));
  }
  GluCase c = base(1, static_cast<std::int64_t>(gates.size()));
  c.dtype = DType::kF32;  // the grid exactly
  c.out_dtype = std::get<1>(GetParam());
  c.with_reference = false;
  fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
  float* x = static_cast<float*>(b.x.data());
  for (std::size_t i = 0; i < gates.size(); ++i) {
    x[i] = gates[i];
    x[gates.size() + i] = 1.0f;
  }
  b.ref.resize(gates.size());
  ASSERT_TRUE(fa::glu_reference(fa::cli::glu_params(c), b.tensors, b.ref.data()).ok());
  ASSERT_TRUE(fa::glu_forward(fa::cli::glu_params(c), b.tensors).ok());
  const fa::cli::GluCheck r = fa::cli::check_glu(c, b);
  EXPECT_TRUE(r.pass) << fa::cli::describe(c) << ": worst " << r.worst_share << ", " << r.mismatches << " past, nonfinite " << r.nonfinite;
}

// Every one of the 65536 fp16 or bf16 gate values (infinities, NaNs and
// subnormals among them), with an up half in [-1, 1): the float64
// reference holds, and an output whose act(g) came from the table
// (GluParams::lookup_activation, the AVX2 and AVX-512 paths) has the bits
// of the computed one.
TEST_P(GluPaths, EveryHalfPrecisionGateLookedUpAsComputed) {
  const DType dtype = std::get<1>(GetParam());
  if (dtype == DType::kF32) GTEST_SKIP() << "fp32 gates are always computed";
  constexpr std::int64_t kValues = 65536;
  GluCase c = base(1, kValues);
  c.out_dtype = DType::kF32;  // the product unrounded beyond fp32
  c.with_reference = false;
  fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
  auto* x = static_cast<std::uint16_t*>(b.x.data());
  std::uint32_t state = 12345;
  for (std::int64_t i = 0; i < kValues; ++i) {
    x[i] = static_cast<std::uint16_t>(i);
    state = state * 1664525u + 1013904223u;
    fa::detail::store_from_f32(x, dtype, kValues + i, static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  b.ref.resize(kValues);
  fa::GluParams p = fa::cli::glu_params(c);
  ASSERT_TRUE(fa::glu_reference(p, b.tensors, b.ref.data()).ok());
  const bool gathers = isa() == fa::Isa::kAvx2 || isa() == fa::Isa::kAvx512 || isa() == fa::Isa::kAvx512Bf16;
  p.lookup_activation = true;
  EXPECT_EQ(fa::glu_uses_activation_table(p, dtype), gathers && c.params.kind != GluKind::kReGlu);
  p.lookup_activation.reset();  // the faster of the two on this core: a table only where there is one
  if (!gathers || c.params.kind == GluKind::kReGlu) {
    EXPECT_FALSE(fa::glu_uses_activation_table(p, dtype));
  }
  p.lookup_activation = false;
  EXPECT_FALSE(fa::glu_uses_activation_table(p, dtype));
  ASSERT_TRUE(fa::glu_forward(p, b.tensors).ok());
  const std::vector<float> computed(static_cast<const float*>(b.y.data()), static_cast<const float*>(b.y.data()) + kValues);
  fa::cli::GluCheck r = fa::cli::check_glu(c, b);
  EXPECT_TRUE(r.pass) << "computed: worst " << r.worst_share << ", " << r.mismatches << " past, nonfinite " << r.nonfinite;
  p.lookup_activation = true;
  std::memset(b.y.data(), 0, b.y.bytes());
  ASSERT_TRUE(fa::glu_forward(p, b.tensors).ok());
  const float* looked_up = static_cast<const float*>(b.y.data());
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < kValues; ++i) {
    const bool same = std::isnan(computed[i]) ? std::isnan(looked_up[i]) : std::memcmp(&computed[i], &looked_up[i], 4) == 0;
    if (!same && differ++ < 3) ADD_FAILURE() << "gate bits " << i << ": computed " << computed[i] << ", looked up " << looked_up[i];
  }
  EXPECT_EQ(differ, 0);
  r = fa::cli::check_glu(c, b);
  EXPECT_TRUE(r.pass) << "looked up: worst " << r.worst_share << ", " << r.mismatches << " past, nonfinite " << r.nonfinite;
}

// Non-temporal stores write the same bits as cached ones.
TEST_P(GluPaths, StreamedOutputEqualsCached) {
  GluCase c = base(6, 200);  // 64-byte rows in fp32; a tail past the vectors
  c.out_dtype = DType::kF32;
  fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
  fa::GluParams p = fa::cli::glu_params(c);
  p.stream_output = false;
  ASSERT_TRUE(fa::glu_forward(p, b.tensors).ok());
  const std::vector<char> cached(static_cast<const char*>(b.y.data()), static_cast<const char*>(b.y.data()) + b.y.bytes());
  std::memset(b.y.data(), 0, b.y.bytes());
  p.stream_output = true;
  ASSERT_TRUE(fa::glu_forward(p, b.tensors).ok());
  EXPECT_EQ(std::memcmp(cached.data(), b.y.data(), cached.size()), 0);
  EXPECT_TRUE(fa::cli::check_glu(c, b).pass);
}

// A NaN in the gate or the up half spoils its own output only.
TEST_P(GluPaths, NanStaysInItsElement) {
  GluCase c = base(2, 40);
  fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
  fa::detail::store_from_f32(b.x.data(), c.dtype, 3, std::numeric_limits<float>::quiet_NaN());        // gate of (0, 3)
  fa::detail::store_from_f32(b.x.data(), c.dtype, 80 + 40 + 38, std::numeric_limits<float>::quiet_NaN());  // up of (1, 38)
  ASSERT_TRUE(fa::glu_forward(fa::cli::glu_params(c), b.tensors).ok());
  for (std::int64_t i = 0; i < 80; ++i) {
    const float v = fa::detail::load_as_f32(b.y.data(), c.dtype, i);
    if (i == 3 || i == 40 + 38) {
      EXPECT_TRUE(std::isnan(v)) << i;
    } else {
      EXPECT_TRUE(std::isfinite(v)) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, GluPaths,
                         ::testing::Combine(::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16),
                                            ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                                            ::testing::Values(GluKind::kSwiGlu, GluKind::kGeGluErf, GluKind::kGeGluTanh, GluKind::kReGlu)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  fa::cli::glu_kind_name(std::get<2>(info.param))[0] + std::to_string(static_cast<int>(std::get<2>(info.param)));
                         });

TEST(GluValidation, RefusesBadArgumentsWithOneLine) {
  std::vector<float> x(2 * 8 * 3, 1.0f), y(8 * 3, 7.0f);
  const std::vector<std::pair<std::string, std::function<void(fa::GluParams&, fa::GluTensors&)>>> cases = {
      {"x: hidden must be even", [](fa::GluParams&, fa::GluTensors& t) { t.x.hidden = 15; }},
      {"y: shape", [](fa::GluParams&, fa::GluTensors& t) { t.y.hidden = 7; }},
      {"y: shape", [](fa::GluParams&, fa::GluTensors& t) { t.y.rows = 2; }},
      {"x: data is null", [](fa::GluParams&, fa::GluTensors& t) { t.x.data = nullptr; }},
      {"y: dtype", [](fa::GluParams&, fa::GluTensors& t) { t.y.dtype = DType::kFP8E4M3; }},
      {"x: row_stride", [](fa::GluParams&, fa::GluTensors& t) { t.x.row_stride = 4; }},
      {"threads", [](fa::GluParams& p, fa::GluTensors&) { p.threads = -2; }},
  };
  for (const auto& [name, spoil] : cases) {
    fa::GluParams p;
    fa::GluTensors t;
    t.x = {x.data(), DType::kF32, 3, 16, 0};
    t.y = {y.data(), DType::kF32, 3, 8, 0};
    spoil(p, t);
    const fa::Status s = fa::glu_forward(p, t);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << name << ": " << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
  for (float v : y) EXPECT_EQ(v, 7.0f);  // nothing written
}

}  // namespace
