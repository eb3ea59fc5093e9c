// LayerNorm and RMSNorm: every kernel path against the float64 reference,
// the variance that does not cancel, the fused residual's bits, NaN rows,
// strides, in place, thread counts, and the one-line refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <tuple>
#include <vector>

#include "common/dtype_convert.h"
#include "norm_case.h"

namespace {

using fa::DType;
using fa::NormKind;
using fa::cli::NormCase;

class NormPaths : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, NormKind>> {
 protected:
  void SetUp() override {
    fa::NormParams p;
    p.isa = isa();
    fa::Isa chosen;
    if (!fa::norm_isa(p, &chosen).ok()) GTEST_SKIP() << fa::isa_name(isa()) << " not available";
  }
  fa::Isa isa() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  NormKind kind() const { return std::get<2>(GetParam()); }
  NormCase base(std::int64_t rows, std::int64_t hidden) const {
    NormCase c;
    c.kind = kind();
    c.rows = rows;
    c.hidden = hidden;
    c.dtype = dtype();
    c.isa = isa();
    c.seed = 7 + static_cast<std::uint64_t>(hidden);
    return c;
  }
};

TEST_P(NormPaths, MatchesFloat64Reference) {
  for (auto [rows, hidden] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {2, 3}, {9, 31}, {33, 1024}, {4, 4099}}) {
    for (int variant = 0; variant < 4; ++variant) {
      NormCase c = base(rows, hidden);
      c.residual = variant & 1;
      c.gamma = variant != 2;
      c.beta = variant < 2;
      c.param_dtype = variant == 3 ? dtype() : DType::kF32;
      c.threads = 1 + variant;
      fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
      fa::NormParams p = fa::cli::norm_params(c);
      p.stream_output = variant >= 2;  // y through non-temporal stores (aligned rows) or not
      ASSERT_TRUE(fa::norm_forward(p, b.tensors).ok());
      const fa::cli::NormCheck r = fa::cli::check_norm(c, b);
      EXPECT_TRUE(r.pass) << fa::cli::describe(c) << ": rel_l2 " << r.rel_l2_error << " stats " << r.stat_error
                          << " nonfinite " << r.nonfinite;
    }
  }
}

// Rows of 1e4 plus unit noise: the two-pass statistics keep fp32's
// precision, where E[x^2] - E[x]^2 in fp32 loses every digit of the
// variance (shown here on the same rows).
TEST_P(NormPaths, LargeMeanDoesNotCancel) {
  if (dtype() != DType::kF32) GTEST_SKIP() << "1e4 plus unit noise needs fp32 to hold the noise";
  NormCase c = base(16, 4096);
  c.mean_offset = 1e4;
  fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
  ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), b.tensors).ok());
  const fa::cli::NormCheck r = fa::cli::check_norm(c, b);
  EXPECT_TRUE(r.pass) << "rel_l2 " << r.rel_l2_error << " stats " << r.stat_error;
  if (kind() != NormKind::kLayerNorm) return;
  // The one-pass formula on the first row, as a kernel would compute it.
  const float* x = static_cast<const float*>(b.x.data());
  float s = 0, s2 = 0;
  for (int i = 0; i < 4096; ++i) {
    s += x[i];
    s2 += x[i] * x[i];
  }
  const float mean = s / 4096, naive_var = s2 / 4096 - mean * mean;
  const double true_var = 1.0 / (static_cast<double>(b.rstd[0]) * b.rstd[0]) - 1e-5;
  EXPECT_GT(std::fabs(naive_var - true_var) / true_var, 0.5) << "the one-pass variance should fail here";
  EXPECT_LT(std::fabs(1.0 / (static_cast<double>(b.rstd[0]) * b.rstd[0]) - 1e-5 - true_var), 1e-3);
}

// A row whose first element lies far from its mean (1e3 among unit noise):
// the first pass's shift, that element, would cancel most of the variance,
// so the kernel takes the deviations again from the mean it found.
TEST_P(NormPaths, OutlierFirstElementStaysExact) {
  if (dtype() != DType::kF32 || kind() != NormKind::kLayerNorm) GTEST_SKIP() << "fp32 LayerNorm holds the case";
  NormCase c = base(8, 4096);
  fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
  for (std::int64_t r = 0; r < c.rows; ++r) static_cast<float*>(b.x.data())[r * c.hidden] = 1000.0f;
  ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), b.tensors).ok());
  const fa::cli::NormCheck r = fa::cli::check_norm(c, b);
  EXPECT_TRUE(r.pass) << "rel_l2 " << r.rel_l2_error << " stats " << r.stat_error;
}

// The fused call gives the bits of an add (x + residual rounded to x's
// dtype) followed by the norm of that sum, and writes the same sum: with
// its outputs cached, and streamed (the sum through non-temporal stores,
// the row kept in the scratch: rows on 64-byte lines, or a single row of
// any width; 37 x 777 streams y alone).
TEST_P(NormPaths, FusedResidualEqualsAddThenNorm) {
  for (auto [rows, hidden, stream] : {std::tuple<std::int64_t, std::int64_t, bool>{37, 777, false}, {37, 777, true},
                                      {37, 768, true}, {1, 777, true}}) {
    NormCase c = base(rows, hidden);
    c.residual = true;
    fa::cli::NormBuffers fused = fa::cli::make_norm_buffers(c);
    fa::NormParams fused_params = fa::cli::norm_params(c);
    fused_params.stream_output = stream;
    ASSERT_TRUE(fa::norm_forward(fused_params, fused.tensors).ok());
    NormCase plain = c;
    plain.residual = false;
    fa::cli::NormBuffers separate = fa::cli::make_norm_buffers(plain);
    const std::int64_t n = c.rows * c.hidden;
    for (std::int64_t i = 0; i < n; ++i) {  // the add, as its own kernel would store it
      const float h = fa::detail::load_as_f32(fused.x.data(), dtype(), i) + fa::detail::load_as_f32(fused.residual.data(), dtype(), i);
      fa::detail::store_from_f32(separate.x.data(), dtype(), i, h);
    }
    ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(plain), separate.tensors).ok());
    const std::size_t bytes = static_cast<std::size_t>(n) * fa::dtype_size(dtype());
    EXPECT_EQ(0, std::memcmp(fused.sum.data(), separate.x.data(), bytes)) << rows << " x " << hidden << " stream " << stream;
    EXPECT_EQ(0, std::memcmp(fused.y.data(), separate.y.data(), bytes)) << rows << " x " << hidden << " stream " << stream;
    EXPECT_EQ(fused.rstd, separate.rstd);
  }
}

// A NaN in a row makes that row's outputs NaN and no other's; the bits do
// not depend on the thread count; rows at a stride and y written over x.
TEST_P(NormPaths, NanRowsStridesInPlaceAndThreads) {
  NormCase c = base(6, 100);
  fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
  fa::detail::store_from_f32(b.x.data(), dtype(), 2 * 100 + 17, std::numeric_limits<float>::quiet_NaN());
  c.threads = 1;
  ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), b.tensors).ok());
  for (std::int64_t i = 0; i < 600; ++i) {
    const float y = fa::detail::load_as_f32(b.y.data(), dtype(), i);
    EXPECT_EQ(std::isnan(y), i / 100 == 2) << "element " << i;
  }
  const std::size_t es = fa::dtype_size(dtype());
  std::vector<char> one_thread(static_cast<const char*>(b.y.data()), static_cast<const char*>(b.y.data()) + 600 * es);
  c.threads = 3;
  ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), b.tensors).ok());
  EXPECT_EQ(0, std::memcmp(one_thread.data(), b.y.data(), one_thread.size()));
  // x as 3 rows of 100 at a stride of 200 (every other row), y in place.
  fa::NormTensors t = b.tensors;
  t.x.rows = t.y.rows = 3;
  t.x.row_stride = 200;
  t.y = t.x;
  t.mean = t.rstd = nullptr;
  std::vector<char> x_copy(static_cast<const char*>(b.x.data()), static_cast<const char*>(b.x.data()) + 600 * es);
  ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), t).ok());
  for (std::int64_t r = 0; r < 6; ++r) {
    const char* got = static_cast<const char*>(b.x.data()) + r * 100 * es;
    if (r % 2 == 0) {
      EXPECT_EQ(0, std::memcmp(got, one_thread.data() + r * 100 * es, 100 * es)) << "row " << r;
    } else {
      EXPECT_EQ(0, std::memcmp(got, x_copy.data() + r * 100 * es, 100 * es)) << "row " << r << " (between the strided rows)";
    }
  }
}

// A non-finite gamma in a finite row: NaN where the product is NaN (gamma
// NaN, or infinite against RMSNorm's x of 0) and infinite where it is,
// every other output finite.  The NaN carries the payload of all ones, which a rounding
// that skipped its NaN test would carry into the sign bit (0x7fffffff +
// 0x8000) and store as -0 in bf16: the kernels may skip that test only for
// rows whose outputs cannot be NaN.  Elements 5 and 9 lie in the vector
// blocks, 37 in the tail.
TEST_P(NormPaths, NonFiniteGammaGivesNaNAndInfinityWhereTheProductDoes) {
  NormCase c = base(3, 40);
  fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
  float* gamma = static_cast<float*>(b.gamma.data());
  const std::uint32_t ones = 0x7fffffffu;
  std::memcpy(&gamma[5], &ones, sizeof ones);
  std::memcpy(&gamma[37], &ones, sizeof ones);
  gamma[9] = std::numeric_limits<float>::infinity();
  fa::detail::store_from_f32(b.x.data(), dtype(), 9, 0.0f);  // row 0: 0 * inf
  for (std::int64_t r = 1; r < 3; ++r) fa::detail::store_from_f32(b.x.data(), dtype(), r * 40 + 9, r == 1 ? 2.0f : -2.0f);
  ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), b.tensors).ok());
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t i = 0; i < 40; ++i) {
      const float y = fa::detail::load_as_f32(b.y.data(), dtype(), r * 40 + i);
      const bool zero_times_inf = i == 9 && r == 0 && kind() == NormKind::kRmsNorm;  // LayerNorm: (0 - mean) * inf
      if (i == 5 || i == 37 || zero_times_inf) {
        EXPECT_TRUE(std::isnan(y)) << "row " << r << ", element " << i << ": " << y;
      } else if (i == 9 && r == 0) {
        EXPECT_TRUE(std::isinf(y)) << "row 0, element 9: " << y;
      } else if (i == 9) {
        EXPECT_TRUE(std::isinf(y) && (y > 0) == (r == 1)) << "row " << r << ", element 9: " << y;
      } else {
        EXPECT_TRUE(std::isfinite(y)) << "row " << r << ", element " << i << ": " << y;
      }
    }
  }
}

// y written over the row it normalizes in another dtype (one row, so the
// row is all there is): the kernel reads x (or the fused call's sum) again
// after writing y only where y cannot have overwritten it, and otherwise
// keeps the row in its scratch: y as with separate buffers.
TEST_P(NormPaths, OutputOverTheRowInAnotherDtype) {
  const DType other = dtype() == DType::kF32 ? DType::kBF16 : DType::kF32;
  for (const bool fused : {false, true}) {
    NormCase c = base(1, 1000);
    c.residual = fused;
    fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
    std::vector<float> apart(1000), shared(1000);  // room for 1000 of either dtype
    fa::NormTensors t = b.tensors;
    t.y = {apart.data(), other, 1, 1000, 0};
    ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), t).ok());
    // The row the later passes would read (x, or the sum the fused call
    // writes) at the start of `shared`, and y there too.
    if (fused) {
      t.sum.data = shared.data();
    } else {
      std::memcpy(shared.data(), b.x.data(), 1000 * fa::dtype_size(dtype()));
      t.x.data = shared.data();
    }
    t.y = {shared.data(), other, 1, 1000, 0};
    ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), t).ok());
    // Equal up to the rounding of the last operations (the two ways are
    // compiled apart, and the compiler may fuse a multiply and an add in
    // one and not the other); a row read after y overwrote it would be off
    // by far more.
    const double step = other == DType::kF32 ? 1e-6 : 1.0 / 128;
    for (std::int64_t i = 0; i < 1000; ++i) {
      const double a = fa::detail::load_as_f32(shared.data(), other, i), want = fa::detail::load_as_f32(apart.data(), other, i);
      ASSERT_NEAR(a, want, step * (std::fabs(want) + 1e-3)) << (fused ? "fused" : "plain") << ", element " << i;
    }
  }
}

// The unfused calls' add writes the fused call's sum, bit for bit, with
// its sum cached or streamed (rows on 64-byte lines at 3 x 1024), and
// refuses without a sum to write.
TEST_P(NormPaths, ResidualAddWritesTheFusedSum) {
  for (auto [rows, hidden, stream] : {std::tuple<std::int64_t, std::int64_t, bool>{3, 37, false}, {5, 4099, false},
                                      {5, 4099, true}, {3, 1024, true}}) {
    NormCase c = base(rows, hidden);
    c.residual = true;
    fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
    ASSERT_TRUE(fa::norm_forward(fa::cli::norm_params(c), b.tensors).ok());
    const std::vector<char> fused(static_cast<const char*>(b.sum.data()), static_cast<const char*>(b.sum.data()) + b.sum.bytes());
    std::memset(b.sum.data(), 0x55, b.sum.bytes());
    fa::NormParams add_params = fa::cli::norm_params(c);
    add_params.stream_output = stream;
    ASSERT_TRUE(fa::residual_add(add_params, b.tensors).ok());
    EXPECT_EQ(std::memcmp(fused.data(), b.sum.data(), fused.size()), 0) << fa::cli::describe(c);
    fa::NormTensors no_sum = b.tensors;
    no_sum.sum = {};
    const fa::Status s = fa::residual_add(fa::cli::norm_params(c), no_sum);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("residual and sum"), std::string::npos) << s.message();
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, NormPaths,
                         ::testing::Combine(::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16),
                                            ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                                            ::testing::Values(NormKind::kLayerNorm, NormKind::kRmsNorm)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  fa::cli::norm_kind_name(std::get<2>(info.param));
                         });

TEST(NormValidation, RefusesWithOneLine) {
  std::vector<float> x(12, 1.0f), y(12), res(12);
  std::vector<std::uint16_t> half(12);
  auto call = [&](auto edit) {
    fa::NormParams p;
    fa::NormTensors t;
    t.x = {x.data(), DType::kF32, 3, 4, 0};
    t.y = {y.data(), DType::kF32, 3, 4, 0};
    edit(p, t);
    return fa::norm_forward(p, t);
  };
  struct Case {
    const char* expected;
    std::function<void(fa::NormParams&, fa::NormTensors&)> edit;
  };
  const std::vector<Case> cases = {
      {"x: data is null", [](auto&, auto& t) { t.x.data = nullptr; }},
      {"x: rows and hidden must be >= 1 (got [0, 4])", [](auto&, auto& t) { t.x.rows = 0; }},
      {"y: shape [3, 5] differs from x's [3, 4]", [](auto&, auto& t) { t.y.hidden = 5; }},
      {"x: row_stride must be 0 (packed) or >= hidden 4 (got 3)", [](auto&, auto& t) { t.x.row_stride = 3; }},
      {"y: dtype must be fp32, fp16 or bf16 (got int8)", [](auto&, auto& t) { t.y.dtype = DType::kI8; }},
      {"eps must be a finite number > 0 (got 0.000000)", [](auto& p, auto&) { p.eps = 0.0f; }},
      {"eps must be a finite number > 0 (got -1.000000)", [](auto& p, auto&) { p.eps = -1.0f; }},
      {"sum: given without a residual", [&](auto&, auto& t) { t.sum = {res.data(), DType::kF32, 3, 4, 0}; }},
      {"sum: dtype must be x's, fp32 (got fp16)",
       [&](auto&, auto& t) {
         t.residual = {res.data(), DType::kF32, 3, 4, 0};
         t.sum = {half.data(), DType::kF16, 3, 4, 0};
       }},
      {"param_dtype: gamma and beta must be fp32 or x's dtype, fp32 (got bf16)",
       [&](auto&, auto& t) {
         t.gamma = half.data();
         t.param_dtype = DType::kBF16;
       }},
      {"beta: RMSNorm takes no shift",
       [&](auto& p, auto& t) {
         p.kind = NormKind::kRmsNorm;
         t.beta = res.data();
       }},
      {"threads must be 0 (all cores) or a count from 1 to", [](auto& p, auto&) { p.threads = -2; }},
  };
  for (const Case& c : cases) {
    const fa::Status s = call(c.edit);
    EXPECT_EQ(s.code(), fa::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_NE(s.message().find(c.expected), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
}

}  // namespace
