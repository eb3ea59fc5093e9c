// The backward pass (fa2_backward): the float64 reference of the gradients
// against central finite differences of reference_forward (so the reference
// itself is checked), then the kernel on every path against that reference
// on the forward's random cases (random_case.h), and the properties a
// training user relies on: bit-identical results across thread counts, no
// NaN from rows with nothing to attend or from large logits, one-line
// refusals of bad calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "driver/attention_case.h"
#include "driver/host_tensor.h"
#include "driver/version_entry.h"
#include "random_case.h"

namespace {

using fa::DType;
using fa::Layout;
using fa::cli::CaseSpec;
using fa::cli::MaskMode;

// ------------------------------------------------ the reference, checked ---

// A small fp32 call whose inputs the test perturbs: L = Σ dO ∘ O (O from
// reference_forward in float64), so ∂L/∂x is what reference_backward gives.
struct SmallCall {
  fa::AttentionParams p;
  std::vector<float> q, k, v, dout, bias, sinks, slopes;
  std::vector<std::int8_t> mask;

  // (The params point into this call's own vectors, wherever it was copied.)
  fa::AttentionTensors tensors() {
    if (!bias.empty()) p.bias = bias.data();
    if (!sinks.empty()) p.sinks = sinks.data();
    if (!slopes.empty()) p.alibi_slopes = slopes.data();
    if (!mask.empty()) p.mask = mask.data();
    fa::AttentionTensors t;
    const std::int64_t B = p.batch, H = p.num_heads, Hkv = p.kv_heads(), D = p.head_dim;
    t.q = fa::make_view(q.data(), DType::kF32, Layout::kBNSD, B, H, p.seq_q, D);
    t.k = fa::make_view(k.data(), DType::kF32, Layout::kBNSD, B, Hkv, p.seq_kv, D);
    t.v = fa::make_view(v.data(), DType::kF32, Layout::kBNSD, B, Hkv, p.seq_kv, D);
    return t;
  }
  double loss() {
    const std::int64_t B = p.batch, H = p.num_heads, D = p.head_dim;
    std::vector<double> o(static_cast<std::size_t>(B * p.seq_q * H * D));
    EXPECT_TRUE(fa::reference_forward(p, tensors(), o.data(), nullptr).ok());
    double l = 0.0;  // O is BSH, dO BNSD
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < p.seq_q; ++i)
          for (std::int64_t d = 0; d < D; ++d)
            l += double(dout[((b * H + h) * p.seq_q + i) * D + d]) * o[((b * p.seq_q + i) * H + h) * D + d];
    return l;
  }
};

SmallCall small_call(std::uint32_t seed) {
  SmallCall c;
  c.p.batch = 2;
  c.p.seq_q = 5;
  c.p.seq_kv = 7;
  c.p.num_heads = 4;
  c.p.num_kv_heads = 2;
  c.p.head_dim = 8;
  c.p.threads = 1;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, std::int64_t count) {
    x.resize(static_cast<std::size_t>(count));
    for (float& e : x) e = n(rng);
  };
  fill(c.q, 2 * 4 * 5 * 8);
  fill(c.k, 2 * 2 * 7 * 8);
  fill(c.v, 2 * 2 * 7 * 8);
  fill(c.dout, 2 * 4 * 5 * 8);
  return c;
}

// Compares reference_backward with (L(x + e) - L(x - e)) / 2e for every
// element of Q, K, V (and the bias and sinks where present).
void expect_matches_finite_differences(SmallCall c) {
  const fa::AttentionTensors t = c.tensors();
  const fa::AttentionParams& p = c.p;
  const std::int64_t B = p.batch, H = p.num_heads, Hkv = p.kv_heads(), D = p.head_dim;
  std::vector<double> dq(static_cast<std::size_t>(B * p.seq_q * H * D)), dk(static_cast<std::size_t>(B * p.seq_kv * Hkv * D)),
      dv(dk.size()), dbias(c.bias.size()), dsinks(c.sinks.size());
  const fa::TensorView dout = fa::make_view(c.dout.data(), DType::kF32, Layout::kBNSD, B, H, p.seq_q, D);
  ASSERT_TRUE(fa::reference_backward(p, t, dout, dq.data(), dk.data(), dv.data(), c.bias.empty() ? nullptr : dbias.data(),
                                     c.sinks.empty() ? nullptr : dsinks.data())
                  .ok());
  // e = 2^-10: x ± e is exact for |x| < 2^13, so only the O(e²) term and
  // float64 rounding separate the quotient from the derivative.
  constexpr float e = 1.0f / 1024.0f;
  double worst = 0.0;
  auto check = [&](std::vector<float>& x, const std::function<double(std::size_t)>& analytic, const char* name) {
    for (std::size_t n = 0; n < x.size(); ++n) {
      const float keep = x[n];
      x[n] = keep + e;
      const double up = c.loss();
      x[n] = keep - e;
      const double down = c.loss();
      x[n] = keep;
      const double numeric = (up - down) / (2.0 * double(e)), want = analytic(n);
      EXPECT_NEAR(want, numeric, 2e-5 * (1.0 + std::abs(numeric))) << name << "[" << n << "]";
      worst = std::max(worst, std::abs(want - numeric));
    }
  };
  // Inputs are BNSD; the reference's gradients BSH.
  auto bsh = [&](std::int64_t heads, std::int64_t seq, const std::vector<double>& g) {
    return [&, heads, seq](std::size_t n) {
      const std::int64_t d = n % D, s = (n / D) % seq, h = (n / D / seq) % heads, b = n / D / seq / heads;
      return g[((b * seq + s) * heads + h) * D + d];
    };
  };
  check(c.q, bsh(H, p.seq_q, dq), "dQ");
  check(c.k, bsh(Hkv, p.seq_kv, dk), "dK");
  check(c.v, bsh(Hkv, p.seq_kv, dv), "dV");
  if (!c.bias.empty()) check(c.bias, [&](std::size_t n) { return dbias[n]; }, "dbias");
  if (!c.sinks.empty()) check(c.sinks, [&](std::size_t n) { return dsinks[n]; }, "dsinks");
  EXPECT_LT(worst, 1e-4);
}

TEST(ReferenceBackward, PlainGqaMatchesFiniteDifferences) { expect_matches_finite_differences(small_call(1)); }

TEST(ReferenceBackward, CausalAndMaskMatchFiniteDifferences) {
  SmallCall c = small_call(2);
  c.p.causal = true;
  c.mask.assign(5 * 7, 1);
  c.mask[2 * 7 + 1] = c.mask[4 * 7 + 6] = 0;
  c.p.mask = c.mask.data();
  expect_matches_finite_differences(c);
}

TEST(ReferenceBackward, ModifiersMatchFiniteDifferences) {
  SmallCall c = small_call(3);
  c.p.softcap = 1.5f;
  c.slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  c.p.alibi_slopes = c.slopes.data();
  c.bias.resize(4 * 5 * 7);
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& x : c.bias) x = n(rng);
  c.p.bias = c.bias.data();
  c.p.bias_heads = 4;
  c.sinks = {0.3f, -1.0f, 1.2f, 0.0f};
  c.p.sinks = c.sinks.data();
  expect_matches_finite_differences(c);
}

TEST(ReferenceBackward, SharedBiasDropoutAndBandMatchFiniteDifferences) {
  SmallCall c = small_call(4);
  c.bias.resize(5 * 7);
  for (std::size_t i = 0; i < c.bias.size(); ++i) c.bias[i] = 0.1f * float(i % 9) - 0.4f;
  c.p.bias = c.bias.data();
  c.p.bias_heads = 1;
  c.p.keep_prob = 0.7f;  // a fixed mask of (seed, coordinates): L stays smooth in the inputs
  c.p.dropout_seed = 99;
  c.p.sparse_mode = fa::SparseMode::kBand;
  c.p.pre_tokens = 3;
  c.p.next_tokens = 1;
  expect_matches_finite_differences(c);
}

// --------------------------------------------- the kernel, on every path ---

const auto kPaths = ::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16, fa::Isa::kAmx);
const auto kDtypes = ::testing::Values(DType::kF32, DType::kF16, DType::kBF16);

#define SKIP_UNLESS_AVAILABLE(isa) \
  if (!fa::isa_available(isa)) GTEST_SKIP() << fa::isa_name(isa) << " path not available on this CPU/build"

// The forward's random case made a training call: no KV-cache layouts (the
// backward refuses them; checked below), no split-KV (it does not apply).
CaseSpec training_case(DType dtype, std::uint32_t seed) {
  CaseSpec c = fa::cli::random_case(dtype, seed);
  c.cache_seqlens_kv.clear();
  c.paged_block_size = 0;
  c.params.num_splits = 1;
  // Backward tiles: 16 to 128 (the forward's draw goes to 256).
  c.params.tile_q = std::min(c.params.tile_q, 128);
  c.params.tile_kv = std::min(c.params.tile_kv, 128);
  return c;
}

// A case whose tiles are beyond this CPU's L2 budget (the backward holds
// more a tile than the forward: at head_dim 224 and up, 128 x 128 passes a
// 512 KiB L2) is refused with the budget's message, and then runs on
// smaller tiles, halved until they fit.
void expect_gradients_match(CaseSpec c) {
  fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward, fa::cli::kBackward);
  while (!r.status.ok() && r.status.message().find("Error: Resource usage exceeds device limit.") != std::string::npos &&
         std::max(c.params.tile_q, c.params.tile_kv) > 16) {
    (c.params.tile_q >= c.params.tile_kv ? c.params.tile_q : c.params.tile_kv) /= 2;
    r = fa::cli::run_case(c, fa::cli::kForward, fa::cli::kBackward);
  }
  ASSERT_TRUE(r.status.ok()) << r.status.message() << " " << fa::cli::describe(c);
  EXPECT_EQ(r.nonfinite, 0) << fa::cli::describe(c);
  EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(c.dtype)) << fa::cli::describe(c);
  EXPECT_TRUE(r.grads_passed) << r.worst_grad << " rel L2 " << r.grad_rel_l2_error << " " << fa::cli::describe(c);
}

class BackwardShapes : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

TEST_P(BackwardShapes, MatchesFloat64Reference) {
  const auto [isa, dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  CaseSpec c = training_case(dtype, 5000u + static_cast<std::uint32_t>(index) * 7919u + static_cast<std::uint32_t>(dtype) * 104729u);
  c.params.isa = isa;
  c.fp32_grads = index % 4 == 3;
  expect_gradients_match(c);
}

// Random cases per path and dtype: fewer in the sanitizer build (its
// instrumented reference takes most of the time), whose run checks memory.
constexpr int kBackwardCases = FA_SANITIZED_TESTS ? 6 : 16;

INSTANTIATE_TEST_SUITE_P(AllPaths, BackwardShapes, ::testing::Combine(kPaths, kDtypes, ::testing::Range(0, kBackwardCases)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Large logits (Q and K with std-dev 8: scores in the hundreds) and rows
// with nothing to attend (an explicit mask with dead rows, a band that
// misses some rows): finite gradients, zero for the dead rows' dQ.
TEST(Backward, LargeLogitsAndDeadRows) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    CaseSpec c;
    c.dtype = dtype;
    c.params.batch = 1;
    c.params.seq_q = 37;
    c.params.seq_kv = 53;
    c.params.num_heads = 2;
    c.params.head_dim = 40;
    c.input_scale = 8.0;
    c.mask = MaskMode::kCausalAndExplicit;
    c.seed = 11;
    expect_gradients_match(c);
    // A band whose early rows lie before the first key (seq_q > seq_kv,
    // aligned bottom-right): rows 0-13 attend nothing.
    c.mask = MaskMode::kNone;
    c.input_scale = 1.0;
    c.params.seq_kv = 23;
    c.params.sparse_mode = fa::SparseMode::kBand;
    c.params.pre_tokens = 3;
    c.params.next_tokens = 0;
    expect_gradients_match(c);
  }
}

// Bit-identical gradients for 1, 2 and 3 threads and across repeated runs
// (whole-head items on 1 and 2 threads, split passes on 3), with dropout
// and without (where the bf16 pair products' block operands come from one
// fused pass).
class BackwardBits : public ::testing::TestWithParam<float> {};
INSTANTIATE_TEST_SUITE_P(Dropout, BackwardBits, ::testing::Values(0.9f, 1.0f));

TEST_P(BackwardBits, IdenticalAcrossThreadCounts) {
  const std::int64_t B = 2, H = 4, Hkv = 2, S = 150, D = 64;
  fa::AttentionParams p;
  p.batch = B;
  p.seq_q = p.seq_kv = S;
  p.num_heads = H;
  p.num_kv_heads = Hkv;
  p.head_dim = D;
  p.causal = true;
  p.keep_prob = GetParam();
  p.dropout_seed = 5;
  std::vector<float> sinks = {0.5f, -0.5f, 1.0f, 0.0f}, dsinks(4);
  p.sinks = sinks.data();
  const std::size_t nq = B * H * S * D, nkv = B * Hkv * S * D;
  fa::cli::HostBuffer q(nq * 2), k(nkv * 2), v(nkv * 2), o(nq * 2), dout(nq * 2);
  fa::cli::fill_normal(q.data(), DType::kBF16, nq, 1, 1.0);
  fa::cli::fill_normal(k.data(), DType::kBF16, nkv, 2, 1.0);
  fa::cli::fill_normal(v.data(), DType::kBF16, nkv, 3, 1.0);
  fa::cli::fill_normal(dout.data(), DType::kBF16, nq, 4, 1.0);
  std::vector<float> lse(B * H * S);
  fa::AttentionTensors t;
  t.q = fa::make_view(q.data(), DType::kBF16, Layout::kBSH, B, H, S, D);
  t.k = fa::make_view(k.data(), DType::kBF16, Layout::kBSH, B, Hkv, S, D);
  t.v = fa::make_view(v.data(), DType::kBF16, Layout::kBSH, B, Hkv, S, D);
  t.o = fa::make_view(o.data(), DType::kBF16, Layout::kBSH, B, H, S, D);
  t.lse = lse.data();
  ASSERT_TRUE(fa::fa2_forward(p, t).ok());
  std::vector<std::vector<float>> first;
  for (int threads : {1, 2, 3, 2}) {
    p.threads = threads;
    std::vector<float> dq(nq), dk(nkv), dv(nkv);
    fa::AttentionGrads g;
    g.dout = fa::make_view(dout.data(), DType::kBF16, Layout::kBSH, B, H, S, D);
    g.dq = fa::make_view(dq.data(), DType::kF32, Layout::kBSH, B, H, S, D);
    g.dk = fa::make_view(dk.data(), DType::kF32, Layout::kBSH, B, Hkv, S, D);
    g.dv = fa::make_view(dv.data(), DType::kF32, Layout::kBSH, B, Hkv, S, D);
    g.dsinks = dsinks.data();
    ASSERT_TRUE(fa::fa2_backward(p, t, g).ok());
    std::vector<std::vector<float>> now = {dq, dk, dv, dsinks};
    if (first.empty()) {
      first = now;
      continue;
    }
    for (std::size_t i = 0; i < now.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(first[i].data(), now[i].data(), now[i].size() * sizeof(float)))
          << "gradient " << i << " differs with " << threads << " threads";
    }
  }
}

// The backward's workspace grows linearly with the sequence (no seq_q x
// seq_kv buffer anywhere), for bf16 (packed pairs where the path has them)
// and fp32.
TEST(Backward, WorkspaceIsLinearInTheSequence) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    auto bytes = [&](std::int64_t s) {
      fa::AttentionParams p;
      p.batch = 1;
      p.seq_q = p.seq_kv = s;
      p.num_heads = 4;
      p.head_dim = 64;
      p.causal = true;
      return static_cast<double>(fa::fa2_backward_workspace_bytes(p, dtype, 2));
    };
    const double a = bytes(1024), b = bytes(2048), c = bytes(4096);
    ASSERT_GT(a, 0.0);
    EXPECT_DOUBLE_EQ(c - b, 2.0 * (b - a)) << fa::dtype_name(dtype);
  }
}

// Bad calls: one line each, the right status, nothing aborts.
TEST(Backward, RefusesBadCalls) {
  const std::int64_t B = 1, H = 2, S = 20, D = 16;
  std::vector<float> q(B * H * S * D, 0.5f), o(q.size()), dout(q.size(), 1.0f), dq(q.size()), dk(q.size()), dv(q.size()),
      lse(B * H * S);
  fa::AttentionParams p;
  p.batch = B;
  p.seq_q = p.seq_kv = S;
  p.num_heads = H;
  p.head_dim = D;
  fa::AttentionTensors t;
  t.q = t.k = t.v = fa::make_view(q.data(), DType::kF32, Layout::kBNSD, B, H, S, D);
  t.o = fa::make_view(o.data(), DType::kF32, Layout::kBNSD, B, H, S, D);
  t.lse = lse.data();
  ASSERT_TRUE(fa::fa2_forward(p, t).ok());
  fa::AttentionGrads g;
  g.dout = fa::make_view(dout.data(), DType::kF32, Layout::kBNSD, B, H, S, D);
  g.dq = g.dk = g.dv = fa::make_view(dq.data(), DType::kF32, Layout::kBNSD, B, H, S, D);
  g.dk.data = dk.data();
  g.dv.data = dv.data();
  ASSERT_TRUE(fa::fa2_backward(p, t, g).ok());

  auto expect_refused = [&](fa::AttentionParams bp, fa::AttentionTensors bt, fa::AttentionGrads bg, fa::StatusCode code,
                            const char* words) {
    const fa::Status s = fa::fa2_backward(bp, bt, bg);
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  };
  fa::AttentionTensors no_lse = t;
  no_lse.lse = nullptr;
  expect_refused(p, no_lse, g, fa::StatusCode::kInvalidArgument, "log-sum-exp");
  fa::AttentionGrads short_dq = g;
  short_dq.dq.shape[2] = S - 1;
  expect_refused(p, t, short_dq, fa::StatusCode::kInvalidArgument, "dQ: shape");
  fa::AttentionGrads f16_dk = g;
  f16_dk.dk.dtype = DType::kF16;
  expect_refused(p, t, f16_dk, fa::StatusCode::kInvalidArgument, "dK: dtype");
  fa::AttentionGrads no_dout = g;
  no_dout.dout.data = nullptr;
  expect_refused(p, t, no_dout, fa::StatusCode::kInvalidArgument, "dO");
  float dbias[1];
  fa::AttentionGrads stray_dbias = g;
  stray_dbias.dbias = dbias;
  expect_refused(p, t, stray_dbias, fa::StatusCode::kInvalidArgument, "dbias");
  std::int32_t table[1] = {0};
  fa::AttentionParams paged = p;
  paged.block_table = table;
  paged.block_size = 16;
  paged.max_blocks_per_seq = 2;
  paged.kv_num_blocks = 2;
  expect_refused(paged, t, g, fa::StatusCode::kUnsupported, "paged");
  fa::AttentionParams bad_heads = p;
  bad_heads.num_kv_heads = 3;
  expect_refused(bad_heads, t, g, fa::StatusCode::kInvalidArgument, "num_kv_heads");
}

}  // namespace
