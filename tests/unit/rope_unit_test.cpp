// RoPE: the frequencies of every scaling against their published
// definitions, the reference against RoPE's own properties (pair norms kept,
// position 0 the identity, scores that depend on p - p' only), every kernel
// path against the reference at edge positions, in place against out of
// place, TND positions per sequence, NaN kept to its pair, and the one-line
// refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "rope_case.h"

namespace {

using fa::DType;
using fa::RopeMode;
using fa::RopeScaling;
using fa::cli::RopeCase;

std::vector<double> frequencies(const fa::RopeParams& p, std::int64_t rd) {
  std::vector<double> f(static_cast<std::size_t>(rd / 2));
  EXPECT_TRUE(fa::rope_inv_frequencies(p, rd, f.data()).ok());
  return f;
}

TEST(RopeFrequencies, PlainIsBaseToTheMinusTwoIOverD) {
  fa::RopeParams p;
  const std::vector<double> f = frequencies(p, 128);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 1.0 / std::pow(10000.0, 2.0 / 128), 1e-15);
  EXPECT_NEAR(f[63], 1.0 / std::pow(10000.0, 126.0 / 128), 1e-18);
}

TEST(RopeFrequencies, LinearDividesEveryFrequency) {
  fa::RopeParams p;
  const std::vector<double> plain = frequencies(p, 64);
  p.scaling = RopeScaling::kLinear;
  p.factor = 4;
  const std::vector<double> f = frequencies(p, 64);
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], plain[i] / 4, 1e-18) << i;
}

TEST(RopeFrequencies, NtkKeepsTheHighestAndDividesTheLowestByFactor) {
  // NTK-aware: base' = base * factor^(d / (d - 2)), so frequency 0 stays 1
  // and the last, base'^(-(d-2)/d), is the plain one over factor.
  fa::RopeParams p;
  const std::vector<double> plain = frequencies(p, 128);
  p.scaling = RopeScaling::kNtk;
  p.factor = 8;
  const std::vector<double> f = frequencies(p, 128);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[63] / plain[63], 1.0 / 8, 1e-12);
  for (std::size_t i = 1; i < f.size(); ++i) EXPECT_LT(f[i], plain[i]) << i;
}

TEST(RopeFrequencies, Llama3KeepsShortWavelengthsScalesLongOnesRampsBetween) {
  // Llama 3.1: base 500000, factor 8, low 1, high 4, 8192 trained positions.
  fa::RopeParams p;
  p.base = 500000;
  p.scaling = RopeScaling::kLlama3;
  p.factor = 8;
  fa::RopeParams plain_params;
  plain_params.base = 500000;
  const std::vector<double> plain = frequencies(plain_params, 128), f = frequencies(p, 128);
  int kept = 0, scaled = 0, ramped = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double wavelength = 2 * M_PI / plain[i];
    if (wavelength < 8192.0 / 4) {
      EXPECT_DOUBLE_EQ(f[i], plain[i]) << i;
      ++kept;
    } else if (wavelength > 8192.0) {
      EXPECT_NEAR(f[i], plain[i] / 8, 1e-18) << i;
      ++scaled;
    } else {
      // Between: f = (1 - s) f / 8 + s f with s = (8192 / wavelength - 1) / 3.
      const double s = (8192.0 / wavelength - 1.0) / 3.0;
      EXPECT_NEAR(f[i], (1 - s) * plain[i] / 8 + s * plain[i], 1e-15) << i;
      EXPECT_GT(f[i], plain[i] / 8);
      EXPECT_LT(f[i], plain[i]);
      ++ramped;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(ramped, 0);
}

TEST(RopeFrequencies, FactorOneChangesNothing) {
  fa::RopeParams p;
  const std::vector<double> plain = frequencies(p, 96);
  for (RopeScaling s : {RopeScaling::kLinear, RopeScaling::kNtk, RopeScaling::kLlama3}) {
    p.scaling = s;
    p.factor = 1;
    const std::vector<double> f = frequencies(p, 96);
    for (std::size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], plain[i], 1e-15 * plain[i]) << static_cast<int>(s) << " " << i;
  }
}

// A case's reference Q for vector (b, h, s), D doubles.
const double* ref_q(const RopeCase& c, const fa::cli::RopeBuffers& b, std::int64_t bb, std::int64_t h, std::int64_t s) {
  return b.q_ref.data() + ((bb * c.heads + h) * c.seq + s) * c.head_dim;
}

TEST(RopeReference, KeepsPairNormsAndPositionZeroIsTheIdentity) {
  for (RopeMode mode : {RopeMode::kRotateHalf, RopeMode::kInterleaved}) {
    RopeCase c;
    c.dtype = DType::kF32;
    c.params.mode = mode;
    c.seq = 50;
    c.heads = 2;
    c.head_dim = 64;
    const fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
    for (std::int64_t s = 0; s < c.seq; ++s) {
      const double* y = ref_q(c, b, 0, 1, s);
      for (std::int64_t i = 0; i < 32; ++i) {
        const std::int64_t first = mode == RopeMode::kRotateHalf ? i : 2 * i;
        const std::int64_t second = mode == RopeMode::kRotateHalf ? i + 32 : 2 * i + 1;
        const double a = fa::detail::load_as_f32(b.tensors.q.data, DType::kF32, b.tensors.q.offset(0, 1, s, first));
        const double bb = fa::detail::load_as_f32(b.tensors.q.data, DType::kF32, b.tensors.q.offset(0, 1, s, second));
        EXPECT_NEAR(std::hypot(y[first], y[second]), std::hypot(a, bb), 1e-12);
        if (s == 0) {
          EXPECT_DOUBLE_EQ(y[first], a);
          EXPECT_DOUBLE_EQ(y[second], bb);
        }
      }
    }
  }
}

// RoPE's point: q(p) . k(p') depends on p - p' alone.  The same vectors at
// positions shifted by 1000 give the same dot products, through the
// reference and through the kernel.
TEST(RopeReference, ScoresDependOnRelativePositionOnly) {
  for (RopeMode mode : {RopeMode::kRotateHalf, RopeMode::kInterleaved}) {
    RopeCase c;
    c.dtype = DType::kF32;
    c.params.mode = mode;
    c.seq = 16;
    c.heads = 1;
    c.kv_heads = 1;
    c.head_dim = 64;
    RopeCase shifted = c;
    shifted.position_offset = 1000;
    fa::cli::RopeBuffers b0 = fa::cli::make_rope_buffers(c), b1 = fa::cli::make_rope_buffers(shifted);
    ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(c), b0.tensors).ok());
    ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(shifted), b1.tensors).ok());
    auto dot = [&](const std::vector<double>& q, const std::vector<double>& k, std::int64_t i, std::int64_t j) {
      double d = 0;
      for (std::int64_t x = 0; x < 64; ++x) d += q[static_cast<std::size_t>(i * 64 + x)] * k[static_cast<std::size_t>(j * 64 + x)];
      return d;
    };
    auto kernel_dot = [&](const fa::cli::RopeBuffers& b, std::int64_t i, std::int64_t j) {
      double d = 0;
      for (std::int64_t x = 0; x < 64; ++x) {
        d += static_cast<const float*>(b.q.data())[i * 64 + x] * static_cast<double>(static_cast<const float*>(b.k.data())[j * 64 + x]);
      }
      return d;
    };
    for (std::int64_t i = 0; i < 16; ++i) {
      for (std::int64_t j = 0; j < 16; j += 5) {
        EXPECT_NEAR(dot(b0.q_ref, b0.k_ref, i, j), dot(b1.q_ref, b1.k_ref, i, j), 1e-9);
        EXPECT_NEAR(kernel_dot(b0, i, j), kernel_dot(b1, i, j), 1e-4);
      }
    }
  }
}

class RopePaths : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, RopeMode>> {
 protected:
  void SetUp() override {
    fa::RopeParams p;
    p.isa = isa();
    fa::Isa chosen;
    if (!fa::rope_isa(p, &chosen).ok()) GTEST_SKIP() << fa::isa_name(isa()) << " not available";
  }
  fa::Isa isa() const { return std::get<0>(GetParam()); }
  RopeCase base() const {
    RopeCase c;
    c.isa = isa();
    c.dtype = std::get<1>(GetParam());
    c.params.mode = std::get<2>(GetParam());
    return c;
  }
};

// The largest positions the computed angles take (2^24 - 1) and every
// rotary width from 2 to 34 (vector bodies and scalar tails of each path).
TEST_P(RopePaths, EdgePositionsAndEveryRotaryWidth) {
  for (std::int64_t rd = 2; rd <= 34; rd += 2) {
    RopeCase c = base();
    c.seq = 3;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 36;
    c.params.rotary_dim = rd;
    c.position_offset = rd == 34 ? (1 << 24) - 3 : rd * 1000;
    c.out_dtype = rd % 4 == 0 ? std::optional<DType>(DType::kF32) : std::nullopt;
    fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
    ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(c), b.tensors).ok());
    const fa::cli::RopeCheck r = fa::cli::check_rope(c, b);
    EXPECT_TRUE(r.pass) << fa::cli::describe(c) << ": worst " << r.worst_share << ", " << r.mismatches << " past, nonfinite " << r.nonfinite;
  }
}

TEST_P(RopePaths, InPlaceEqualsOutOfPlaceBitForBit) {
  RopeCase c = base();
  c.seq = 21;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 96;
  c.params.rotary_dim = 64;
  c.layout = fa::Layout::kBNSD;
  RopeCase out = c;
  out.out_dtype = c.dtype;
  fa::cli::RopeBuffers a = fa::cli::make_rope_buffers(c), b = fa::cli::make_rope_buffers(out);
  ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(c), a.tensors).ok());
  ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(out), b.tensors).ok());
  EXPECT_EQ(std::memcmp(a.q.data(), b.q_out.data(), a.q.bytes()), 0);
  EXPECT_EQ(std::memcmp(a.k.data(), b.k_out.data(), a.k.bytes()), 0);
  EXPECT_TRUE(fa::cli::check_rope(out, b).pass);
}

// rope_forward keeps the last frequencies a thread computed: calls that
// change any parameter they depend on, one after another on one thread,
// each match the reference of their own parameters.
TEST_P(RopePaths, ChangedParametersAreNotServedFromTheCache) {
  std::vector<fa::RopeParams> sets(6, base().params);
  sets[1].base = 500000.0;
  sets[2].scaling = fa::RopeScaling::kLinear;
  sets[2].factor = 4.0;
  sets[3].scaling = fa::RopeScaling::kLlama3;
  sets[3].factor = 8.0;
  sets[4] = sets[3];
  sets[4].high_freq_factor = 2.0;
  sets[5].rotary_dim = 32;
  for (int round = 0; round < 2; ++round) {
    for (const fa::RopeParams& params : sets) {
      RopeCase c = base();
      c.seq = 5;
      c.heads = 2;
      c.kv_heads = 1;
      c.head_dim = 64;
      c.position_offset = 3000;  // angles far from 0, where the frequencies show
      c.params = params;
      fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
      ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(c), b.tensors).ok());
      EXPECT_TRUE(fa::cli::check_rope(c, b).pass) << fa::cli::describe(c);
    }
  }
}

// Separate outputs through non-temporal stores give the cached stores'
// bits: head rows on 64-byte lines (head_dim 128, the second half of the
// rotary part and the copied rest on vector boundaries), and rows that are
// not (head_dim 72), which take the cached stores.
TEST_P(RopePaths, StreamedOutputsEqualCached) {
  for (std::int64_t head_dim : {128, 72}) {
    RopeCase c = base();
    c.seq = 19;
    c.heads = 4;
    c.kv_heads = 2;
    c.head_dim = head_dim;
    c.params.rotary_dim = head_dim == 128 ? 96 : 64;
    c.layout = fa::Layout::kBNSD;
    c.out_dtype = c.dtype;
    fa::cli::RopeBuffers cached = fa::cli::make_rope_buffers(c), streamed = fa::cli::make_rope_buffers(c);
    fa::RopeParams p = fa::cli::rope_params(c);
    p.stream_output = false;
    ASSERT_TRUE(fa::rope_forward(p, cached.tensors).ok());
    p.stream_output = true;
    ASSERT_TRUE(fa::rope_forward(p, streamed.tensors).ok());
    EXPECT_EQ(std::memcmp(cached.q_out.data(), streamed.q_out.data(), cached.q_out.bytes()), 0) << head_dim;
    EXPECT_EQ(std::memcmp(cached.k_out.data(), streamed.k_out.data(), cached.k_out.bytes()), 0) << head_dim;
    EXPECT_TRUE(fa::cli::check_rope(c, streamed).pass) << head_dim;
  }
}

// TND: each sequence's tokens count from 0, as the same sequences run one
// by one in BSH do.
TEST_P(RopePaths, TndPositionsRestartPerSequence) {
  RopeCase packed = base();
  packed.layout = fa::Layout::kTND;
  packed.cu_seqlens = {0, 7, 7, 20};
  packed.seq = 20;
  packed.heads = 2;
  packed.kv_heads = 2;
  packed.head_dim = 32;
  fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(packed);
  ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(packed), b.tensors).ok());
  EXPECT_TRUE(fa::cli::check_rope(packed, b).pass);
  // Token 7 starts the third sequence: position 0, unrotated.
  const std::size_t es = fa::dtype_size(packed.dtype);
  fa::cli::RopeBuffers fresh = fa::cli::make_rope_buffers(packed);
  const std::size_t row = static_cast<std::size_t>(2 * 32) * es;
  EXPECT_EQ(std::memcmp(static_cast<const char*>(b.q.data()) + 7 * row, static_cast<const char*>(fresh.q.data()) + 7 * row, row), 0);
  EXPECT_NE(std::memcmp(static_cast<const char*>(b.q.data()) + 8 * row, static_cast<const char*>(fresh.q.data()) + 8 * row, row), 0);
}

// A NaN spoils its own pair and nothing else.
TEST_P(RopePaths, NanStaysInItsPair) {
  RopeCase c = base();
  c.seq = 4;
  c.heads = 1;
  c.kv_heads = 1;
  c.head_dim = 64;
  fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
  fa::detail::store_from_f32(b.q.data(), c.dtype, 3 * 64 + 5, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(fa::rope_forward(fa::cli::rope_params(c), b.tensors).ok());
  const std::int64_t partner = c.params.mode == RopeMode::kRotateHalf ? 5 + 32 : 4;
  for (std::int64_t j = 0; j < 64; ++j) {
    const float v = fa::detail::load_as_f32(b.q.data(), c.dtype, 3 * 64 + j);
    if (j == 5 || j == partner) {
      EXPECT_TRUE(std::isnan(v)) << j;
    } else {
      EXPECT_TRUE(std::isfinite(v)) << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, RopePaths,
                         ::testing::Combine(::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16),
                                            ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                                            ::testing::Values(RopeMode::kRotateHalf, RopeMode::kInterleaved)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  (std::get<2>(info.param) == RopeMode::kRotateHalf ? "half" : "interleaved");
                         });

// Every refusal: one line naming the argument, and nothing written.
TEST(RopeValidation, RefusesBadArgumentsWithOneLine) {
  RopeCase c;
  c.dtype = DType::kF32;
  c.seq = 4;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 8;
  fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
  const std::vector<char> before(static_cast<const char*>(b.q.data()), static_cast<const char*>(b.q.data()) + b.q.bytes());
  std::vector<std::int64_t> bad_positions = {0, 1, -1, 3};
  std::vector<std::int32_t> cu = {0, 3, 2};
  std::vector<std::pair<std::string, std::function<void(fa::RopeParams&, fa::RopeTensors&)>>> cases = {
      {"rotary_dim", [](fa::RopeParams& p, fa::RopeTensors&) { p.rotary_dim = 3; }},
      {"rotary_dim", [](fa::RopeParams& p, fa::RopeTensors&) { p.rotary_dim = 10; }},
      {"base", [](fa::RopeParams& p, fa::RopeTensors&) { p.base = 0; }},
      {"factor", [](fa::RopeParams& p, fa::RopeTensors&) { p.scaling = RopeScaling::kLinear, p.factor = 0.5; }},
      {"high_freq_factor", [](fa::RopeParams& p, fa::RopeTensors&) { p.scaling = RopeScaling::kLlama3, p.factor = 8, p.high_freq_factor = 1; }},
      {"threads", [](fa::RopeParams& p, fa::RopeTensors&) { p.threads = -1; }},
      {"q and k", [](fa::RopeParams&, fa::RopeTensors& t) { t.q.data = nullptr, t.k.data = nullptr; }},
      {"k", [](fa::RopeParams&, fa::RopeTensors& t) { t.k.shape[3] = 6; }},
      {"q", [](fa::RopeParams&, fa::RopeTensors& t) { t.q.dtype = DType::kI8; }},
      {"q", [](fa::RopeParams&, fa::RopeTensors& t) { t.q.strides[3] = 2; }},
      {"q_out", [](fa::RopeParams&, fa::RopeTensors& t) { t.q_out = t.q, t.q_out.dtype = DType::kF16; }},
      {"positions", [&](fa::RopeParams&, fa::RopeTensors& t) { t.positions = bad_positions.data(); }},
      {"cos and sin", [](fa::RopeParams&, fa::RopeTensors& t) { t.cos = reinterpret_cast<const float*>(&t); }},
      {"cu_seqlens", [&](fa::RopeParams& p, fa::RopeTensors&) { p.cu_seqlens = cu.data(), p.num_sequences = 2; }},
  };
  for (auto& [name, spoil] : cases) {
    fa::RopeParams p = fa::cli::rope_params(c);
    fa::RopeTensors t = b.tensors;
    spoil(p, t);
    const fa::Status s = fa::rope_forward(p, t);
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << name << ": " << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  }
  EXPECT_EQ(std::memcmp(before.data(), b.q.data(), before.size()), 0);
}

}  // namespace
