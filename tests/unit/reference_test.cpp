// The reference itself, checked on cases whose answer is known in closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flash_attention/flash_attention.h"

namespace {

struct Tiny {
  std::vector<float> q, k, v, o;
  fa::AttentionParams p;
  fa::AttentionTensors t;
  Tiny(std::int64_t sq, std::int64_t skv, std::int64_t d) : q(sq * d), k(skv * d), v(skv * d), o(sq * d) {
    p.seq_q = sq;
    p.seq_kv = skv;
    p.head_dim = d;
    t.q = fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 1, sq, d);
    t.k = fa::make_view(k.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 1, skv, d);
    t.v = fa::make_view(v.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 1, skv, d);
    t.o = fa::make_view(o.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 1, sq, d);
  }
};

TEST(Reference, EqualScoresAverageTheValues) {
  Tiny c(2, 4, 8);  // Q = 0: every score is 0, softmax is uniform
  for (std::size_t i = 0; i < c.v.size(); ++i) c.v[i] = static_cast<float>(i % 13);
  std::vector<double> out(2 * 8), lse(2);
  ASSERT_TRUE(fa::reference_forward(c.p, c.t, out.data(), lse.data()).ok());
  for (int d = 0; d < 8; ++d) {
    double mean = 0;
    for (int j = 0; j < 4; ++j) mean += c.v[j * 8 + d] / 4.0;
    EXPECT_NEAR(out[d], mean, 1e-12);
    EXPECT_NEAR(out[8 + d], mean, 1e-12);
  }
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-12);
}

TEST(Reference, TwoKeysGiveTheLogisticWeights) {
  Tiny c(1, 2, 8);
  c.q[0] = 1.0f;
  c.k[0] = 2.0f;  // score of key 0 = 2 * scale, key 1 = 0
  for (int d = 0; d < 8; ++d) {
    c.v[d] = 1.0f;
    c.v[8 + d] = -1.0f;
  }
  c.p.scale = 1.0f;
  std::vector<double> out(8), lse(1);
  ASSERT_TRUE(fa::reference_forward(c.p, c.t, out.data(), lse.data()).ok());
  const double w0 = 1.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(out[0], w0 - (1.0 - w0), 1e-12);
  EXPECT_NEAR(lse[0], std::log(std::exp(2.0) + 1.0), 1e-12);
}

TEST(Reference, CausalIsAlignedBottomRight) {
  Tiny c(2, 3, 8);  // query 0 sees keys 0..1, query 1 sees keys 0..2
  for (int j = 0; j < 3; ++j) {
    for (int d = 0; d < 8; ++d) c.v[j * 8 + d] = static_cast<float>(j);
  }
  c.p.causal = true;
  std::vector<double> out(16), lse(2);
  ASSERT_TRUE(fa::reference_forward(c.p, c.t, out.data(), lse.data()).ok());
  EXPECT_NEAR(out[0], 0.5, 1e-12);   // mean of 0, 1
  EXPECT_NEAR(out[8], 1.0, 1e-12);   // mean of 0, 1, 2
  EXPECT_EQ(fa::attended_pairs(c.p), 5);
}

TEST(Reference, RowWithNothingToAttendIsZeroWithMinusInfLse) {
  Tiny c(3, 1, 8);  // seq_q > seq_kv: queries 0 and 1 see no key under causal
  for (auto& x : c.v) x = 5.0f;
  c.p.causal = true;
  std::vector<double> out(24), lse(3);
  ASSERT_TRUE(fa::reference_forward(c.p, c.t, out.data(), lse.data()).ok());
  EXPECT_EQ(out[0], 0.0);
  EXPECT_EQ(out[8], 0.0);
  EXPECT_NEAR(out[16], 5.0, 1e-12);
  EXPECT_EQ(lse[0], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(fa::attended_pairs(c.p), 1);
}

TEST(Reference, BandAndSinkInClosedForm) {
  Tiny c(1, 5, 8);  // scores all 0; values 0..4; query 0 bottom-right aligned at key 4
  for (int j = 0; j < 5; ++j) {
    for (int d = 0; d < 8; ++d) c.v[j * 8 + d] = static_cast<float>(j);
  }
  c.p.sparse_mode = fa::SparseMode::kBand;
  c.p.pre_tokens = 2;  // keys 2, 3, 4
  c.p.next_tokens = 0;
  const float sink = std::log(3.0f);  // weight 3 against three keys of weight 1
  c.p.sinks = &sink;
  std::vector<double> out(8), lse(1);
  ASSERT_TRUE(fa::reference_forward(c.p, c.t, out.data(), lse.data()).ok());
  EXPECT_NEAR(out[0], (2.0 + 3.0 + 4.0) / 6.0, 1e-6);  // the sink adds weight, no value
  EXPECT_NEAR(lse[0], std::log(6.0), 1e-6);
  EXPECT_EQ(fa::attended_pairs(c.p), 3);
  c.p.sparse_mode = fa::SparseMode::kCausalTopLeft;  // query 0 sees key 0 only
  c.p.sinks = nullptr;
  ASSERT_TRUE(fa::reference_forward(c.p, c.t, out.data(), lse.data()).ok());
  EXPECT_NEAR(out[0], 0.0, 1e-12);
  EXPECT_EQ(fa::attended_pairs(c.p), 1);
}

}  // namespace
