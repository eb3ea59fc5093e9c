// Property tests: the forward pass of this build's version against the
// float64 reference on random shapes and options, plus the edge cases every
// kernel must get exactly right (rows with nothing to attend, huge logits,
// thread-count independence).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "driver/attention_case.h"
#include "driver/host_tensor.h"
#include "driver/paged_cache.h"
#include "driver/quantized_cache.h"
#include "driver/version_entry.h"
#include "random_case.h"
#include "common/dropout.h"
#include "common/dtype_convert.h"

namespace {

using fa::DType;
using fa::Layout;
using fa::cli::CaseSpec;
using fa::cli::random_case;
using fa::cli::MaskMode;


const auto kPaths = ::testing::Values(fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16, fa::Isa::kAmx);
const auto kDtypes = ::testing::Values(DType::kF32, DType::kF16, DType::kBF16);

// A macro, not a function: GTEST_SKIP returns from the function it is in, so
// inside a helper it would let the test body go on.
#define SKIP_UNLESS_AVAILABLE(isa) \
  if (!fa::isa_available(isa)) GTEST_SKIP() << fa::isa_name(isa) << " path not available on this CPU/build"

class RandomShapes : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

const bool kFa1 = fa::cli::kVersion == fa::Version::kFA1;

// Runs a case on `isa` and checks it against the float64 reference (O's
// relative L2 error within `rel_l2`, or the dtype's bound when 0).  FA1
// runs its fixed tiles (0: the version's default) on the same case, and must
// refuse, cleanly, what it does not offer.
void expect_matches_reference(CaseSpec c, fa::Isa isa, double rel_l2 = 0.0) {
  c.params.isa = isa;
  if (kFa1) c.params.tile_q = c.params.tile_kv = 0;
  if (const fa::Status lacks = fa::cli::case_supported(fa::cli::kVersion, c); !lacks.ok()) {
    const fa::Status s = fa::cli::run_case(c, fa::cli::kForward).status;
    EXPECT_EQ(s.code(), fa::StatusCode::kUnsupported) << s.message();
    EXPECT_EQ(s.message(), lacks.message());
    return;
  }
  fa::TilePlan plan;
  if (const fa::Status s = fa::plan(fa::cli::kVersion, c.params, c.dtype, &plan); !s.ok()) {
    // Beyond this CPU's L2 budget: the call must refuse it the same way.
    EXPECT_NE(s.message().find("Error: Resource usage exceeds device limit."), std::string::npos) << s.message();
    EXPECT_FALSE(fa::cli::run_case(c, fa::cli::kForward).status.ok());
    return;
  }
  const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.nonfinite, 0) << fa::cli::describe(c);
  EXPECT_LE(r.rel_l2_error, rel_l2 > 0.0 ? rel_l2 : fa::cli::rel_l2_bound(c.dtype)) << fa::cli::describe(c);
  EXPECT_LE(r.lse_max_error, fa::cli::lse_bound(c.dtype)) << fa::cli::describe(c);
}

TEST_P(RandomShapes, MatchesFloat64Reference) {
  const auto [isa, dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  expect_matches_reference(random_case(dtype, 1000u + static_cast<std::uint32_t>(index) * 7919u +
                                                  static_cast<std::uint32_t>(dtype) * 104729u),
                           isa);
}

// Random cases per path and dtype (here and in MatrixUnitShapes): fewer in
// the sanitizer build, whose run checks memory rather than numbers and whose
// instrumented float64 reference is slow (the numbers are checked on all 25
// in the plain build).
constexpr int kRandomCases = FA_SANITIZED_TESTS ? 6 : 25;
// The same for the quantized-cache suite (its cases cycle through the
// dtypes and layouts every 4).
constexpr int kCacheCases = FA_SANITIZED_TESTS ? 6 : 12;

INSTANTIATE_TEST_SUITE_P(AllPaths, RandomShapes, ::testing::Combine(kPaths, kDtypes, ::testing::Range(0, kRandomCases)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  std::to_string(std::get<2>(info.param));
                         });

// FP8 inputs (FA3; FA1 and FA2 must refuse them) on the same random
// shapes and options, with every output dtype and descale factors per
// tensor or per head, against the reference on the decoded values.
class Fp8Shapes : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

TEST_P(Fp8Shapes, MatchesFloat64Reference) {
  const auto [isa, dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  CaseSpec c = random_case(dtype, 77000u + static_cast<std::uint32_t>(index) * 7919u + static_cast<std::uint32_t>(dtype));
  c.out_dtype = std::array{DType::kBF16, DType::kF16, DType::kF32}[index % 3];
  c.descale = index % 3;
  if (index >= 9) {  // short GQA queries, one tile for a group's heads, each with its own Q descale
    c.params.seq_q = std::array{6, 13, 30}[index - 9];
    c.params.num_heads = 6;
    c.params.num_kv_heads = 2;
    c.seq_lens_q.clear();
    c.seq_lens_kv.clear();
    if (c.bias_heads > 1) c.bias_heads = 6;
    c.descale = 2;
  }
  expect_matches_reference(c, isa);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, Fp8Shapes,
                         ::testing::Combine(kPaths, ::testing::Values(DType::kFP8E4M3, DType::kFP8E5M2),
                                            ::testing::Range(0, 12)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  std::to_string(std::get<2>(info.param));
                         });

// A quantized K/V cache (int8 with a scale per token and K/V head; FP8 with
// a descale factor per K/V head) read with fp16 or bf16 Q, on the same
// random shapes and options, every other case a decoding one (1 to 4
// query rows: the row path, GQA packing, split-KV) with per-sequence key
// counts or a paged cache half the time; against the reference on the
// dequantized values.  FA1 must refuse them.
class QuantizedKvShapes : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

TEST_P(QuantizedKvShapes, MatchesFloat64Reference) {
  const auto [isa, kv_dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  const std::uint32_t seed = 91000u + static_cast<std::uint32_t>(index) * 7919u + static_cast<std::uint32_t>(kv_dtype);
  CaseSpec c = random_case(index % 4 < 2 ? DType::kBF16 : DType::kF16, seed);
  c.kv_dtype = kv_dtype;
  if (index % 2 == 0) {
    std::mt19937 rng(seed ^ 0x85ebca6bu);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    c.params.seq_q = pick(1, 4);
    if (c.seq_lens_q.empty() && c.cache_seqlens_kv.empty() && c.mask != MaskMode::kExplicit &&
        c.mask != MaskMode::kCausalAndExplicit && c.bias_heads == 0 && pick(0, 1)) {
      for (std::int64_t b = 0; b < c.params.batch; ++b) c.cache_seqlens_kv.push_back(pick(0, static_cast<int>(c.params.seq_kv)));
      if (pick(0, 1)) {
        c.paged_block_size = 16 << pick(0, 2);
        c.params.tile_kv = std::min(c.params.tile_kv, c.paged_block_size);
      }
      if (c.params.sparse_mode == fa::SparseMode::kMaskAndBand) c.params.sparse_mode = fa::SparseMode::kBand;
    }
    for (int& n : c.seq_lens_q) n = std::min(n, 4);
  }
  expect_matches_reference(c, isa);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, QuantizedKvShapes,
                         ::testing::Combine(kPaths, ::testing::Values(DType::kI8, DType::kFP8E4M3, DType::kFP8E5M2),
                                            ::testing::Range(0, kCacheCases)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  std::to_string(std::get<2>(info.param));
                         });

// The shapes the pair path runs (any head_dim, K/V tiles of 32 keys or
// more; on amx bf16 and fp16 in two bf16 pieces, on avx512bf16
// bf16; on both FP8 widened to bf16, FA3 only), every other option random
// as above; the other paths (and fp16 on avx512bf16) run the same cases
// through their own code.
class MatrixUnitShapes : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

TEST_P(MatrixUnitShapes, MatchesFloat64Reference) {
  const auto [isa, dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  const std::uint32_t seed = 50000u + static_cast<std::uint32_t>(index) * 7919u + static_cast<std::uint32_t>(dtype);
  CaseSpec c = random_case(dtype, seed);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // Any head_dim (a multiple of 8; the pair path pads it to its 32-dim step).
  c.params.head_dim = 8 * pick(1, 32);
  c.params.tile_kv = 32 << pick(0, 3);
  if (c.paged_block_size > 0) c.paged_block_size = std::max(c.paged_block_size, c.params.tile_kv);  // a tile in one block
  if (fa::is_fp8(dtype)) {  // as Fp8Shapes: every output dtype, descale factors per tensor or per head
    c.out_dtype = std::array{DType::kBF16, DType::kF16, DType::kF32}[index % 3];
    c.descale = index % 3;
  }
  if (isa == fa::Isa::kAmx || (isa == fa::Isa::kAvx512Bf16 && dtype != DType::kF16)) {
    EXPECT_TRUE(fa::uses_matrix_unit(isa, dtype, c.params.head_dim));
  }
  expect_matches_reference(c, isa);
}

std::string matrix_case_name(const ::testing::TestParamInfo<std::tuple<fa::Isa, DType, int>>& info) {
  return std::string(fa::isa_name(std::get<0>(info.param))) + "_" + std::string(fa::dtype_name(std::get<1>(info.param))) +
         "_" + std::to_string(std::get<2>(info.param));
}
INSTANTIATE_TEST_SUITE_P(AllPaths, MatrixUnitShapes,
                         ::testing::Combine(kPaths, ::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::Range(0, kRandomCases)),
                         matrix_case_name);
// FP8 on the two pair engines (Fp8Shapes runs FP8 on every path).
INSTANTIATE_TEST_SUITE_P(PairEngines, MatrixUnitShapes,
                         ::testing::Combine(::testing::Values(fa::Isa::kAvx512Bf16, fa::Isa::kAmx),
                                            ::testing::Values(DType::kFP8E4M3, DType::kFP8E5M2), ::testing::Range(0, 9)),
                         matrix_case_name);

// The pair path (amx: bf16 and fp16; avx512bf16: bf16; both: FP8) packs each K/V tile
// once per call and shares it between Q tiles, query heads of a GQA group
// and threads (the first item to reach a tile packs it; one arriving while
// it is packed packs its own copy).  Many Q tiles, GQA, a partial last K/V
// tile and four threads, with and without a causal mask: the workspace must
// hold the shared packing (so these cases run through it) and the results
// match the reference.
struct PairPathCase {
  fa::Isa isa;
  DType dtype;
};
class SharedKvPacking : public ::testing::TestWithParam<std::tuple<PairPathCase, MaskMode, int>> {};

TEST_P(SharedKvPacking, MatchesFloat64Reference) {
  const auto [path, mask, threads] = GetParam();
  SKIP_UNLESS_AVAILABLE(path.isa);
  if (kFa1) GTEST_SKIP() << "FA1 runs the vector loop on every path: no pair path, no shared packing";
  if (fa::is_fp8(path.dtype) && fa::cli::kVersion != fa::Version::kFA3) GTEST_SKIP() << "FP8 inputs are FA3's";
  CaseSpec c;
  c.dtype = path.dtype;
  c.mask = mask;
  c.seed = 777u + static_cast<std::uint32_t>(threads);
  fa::AttentionParams& p = c.params;
  p.batch = 2;
  p.seq_q = 300;
  p.seq_kv = 330;  // 5 tiles of 64 keys and 10 more
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.tile_q = 32;
  p.tile_kv = 64;
  p.threads = threads;
  p.isa = path.isa;
  ASSERT_TRUE(fa::uses_matrix_unit(path.isa, path.dtype, p.head_dim));
  const std::size_t kv_bytes = std::size_t(p.batch * p.num_kv_heads * 6 * 64 * p.head_dim) * 2 * 2;
  const std::size_t one = fa::cli::version_workspace_bytes(p, path.dtype, 1), two = fa::cli::version_workspace_bytes(p, path.dtype, 2);
  EXPECT_GE(one - (two - one), kv_bytes);  // what is not per thread
  expect_matches_reference(c, path.isa);
}

INSTANTIATE_TEST_SUITE_P(PairPaths, SharedKvPacking,
                         ::testing::Combine(::testing::Values(PairPathCase{fa::Isa::kAmx, DType::kBF16},
                                                              PairPathCase{fa::Isa::kAmx, DType::kF16},
                                                              PairPathCase{fa::Isa::kAvx512Bf16, DType::kBF16},
                                                              PairPathCase{fa::Isa::kAmx, DType::kFP8E5M2},
                                                              PairPathCase{fa::Isa::kAvx512Bf16, DType::kFP8E4M3}),
                                            ::testing::Values(MaskMode::kNone, MaskMode::kCausal),
                                            ::testing::Values(1, 4)),
                         [](const auto& info) {
                           const PairPathCase& path = std::get<0>(info.param);
                           return std::string(fa::isa_name(path.isa)) + "_" + std::string(fa::dtype_name(path.dtype)) +
                                  (std::get<1>(info.param) == MaskMode::kCausal ? "_causal" : "_full") + "_t" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Where no K/V tile is shared (decoding, packed GQA groups, single-tile
// calls), the amx engine reads bf16 K and V as rows where they lie (head_dim
// a multiple of 32) and keeps O in row tiles: both parities of a 32-dim
// block in one tile for at most 8 query rows, two tiles for more.  Each case
// below goes that way: a tile's last keys inside a block of 16 (copied, with
// zeros after them; a cache's keys past its lengths are NaN), split-KV
// partials, a paged cache, windows, modifiers and dropout (the softmax on
// fp32 P), head_dims 32 and 256, and 8 to 400 rows a K/V head.  An
// FP8 cache with bf16 Q goes the same way in BNSD, each tile widened into
// bf16 rows (the last 32 dims of head_dims 32 and 96 read alone), with its
// per-head descale factors in the score scale and the output; so does an
// int8 cache from 8 rows a K/V head, its per-key scales on the scores and
// on P.  Where the
// K/V heads lie side by side (BSH) one item walks every K/V head of its
// batch entry together, a tile each.  So do a head's 2 to 64 queries with
// no group (bf16), each head alone in its tile.  fp16 (from 9 rows a K/V head; the
// row path keeps 8) reads its rows too, up to 32 rows an item, each tile
// widened into two bf16 pieces a value, at head_dims of 64 and more; the
// case with a 16-row tile ends on an item of 8 rows (both parities in one
// O tile).  The last case is fp16's packed tile of more rows, which packs
// each K/V tile (512 rows a K/V head).
struct KvRowsCase {
  const char* name;
  Layout layout;
  std::int64_t batch, seq_q, seq_kv, heads, kv_heads, head_dim;
  int splits;  // 0: the planner's
  int paged_block_size;
  std::vector<int> cache_seqlens_kv;
  bool causal, sinks, alibi, dropout;
  float softcap;
  DType kv_dtype = DType::kBF16;
  DType dtype = DType::kBF16;  // fp16: the packed tile of two bf16 pieces
  int tile_q = 0;               // 0: the planner's
};
const KvRowsCase kKvRowsCases[] = {
    {"decode_group8_tail", Layout::kBNSD, 2, 1, 1000, 16, 2, 128, 0, 0, {}, false, false, false, false, 0.0f},
    {"decode_group8_cache_lengths", Layout::kBSH, 3, 1, 700, 8, 1, 64, 0, 0, {700, 5, 333}, false, true, false, false, 0.0f},
    {"spec_group4_causal_softcap", Layout::kBSH, 1, 2, 333, 8, 2, 128, 3, 0, {}, true, false, false, false, 30.0f},
    {"rows20_paged_alibi", Layout::kBNSD, 2, 5, 517, 8, 2, 96, 0, 64, {}, true, true, true, false, 0.0f},
    {"rows32_dropout", Layout::kBNSD, 1, 4, 300, 16, 2, 32, 2, 0, {}, false, false, false, true, 0.0f},
    {"group4_head_dim_256", Layout::kBNSD, 1, 1, 270, 8, 2, 256, 0, 0, {}, false, false, false, false, 0.0f},
    {"fp8_e4m3_decode_group8_cache_lengths", Layout::kBNSD, 3, 1, 700, 16, 2, 128, 0, 0, {700, 5, 333}, false, true,
     false, false, 0.0f, DType::kFP8E4M3},
    {"fp8_e5m2_spec_group4_causal_softcap", Layout::kBNSD, 1, 2, 333, 8, 2, 128, 3, 0, {}, true, false, false, false,
     30.0f, DType::kFP8E5M2},
    {"fp8_e4m3_rows20_paged_alibi", Layout::kBNSD, 2, 5, 517, 8, 2, 96, 0, 64, {}, true, true, true, false, 0.0f,
     DType::kFP8E4M3},
    {"fp8_e5m2_rows32_head_dim_32_dropout", Layout::kBNSD, 1, 4, 300, 16, 2, 32, 2, 0, {}, false, false, false, true, 0.0f,
     DType::kFP8E5M2},
    {"bsh_heads_together_paged_lengths", Layout::kBSH, 2, 1, 700, 32, 8, 64, 0, 64, {700, 45}, false, true, false, false,
     0.0f},
    {"fp8_e4m3_bsh_heads_together_causal", Layout::kBSH, 1, 3, 333, 16, 4, 128, 0, 0, {}, true, false, true, false, 0.0f,
     DType::kFP8E4M3},
    {"int8_decode_group8_cache_lengths", Layout::kBNSD, 3, 1, 700, 16, 2, 128, 0, 0, {700, 5, 333}, false, true, false,
     false, 0.0f, DType::kI8},
    {"int8_spec_group4_causal_softcap", Layout::kBNSD, 1, 2, 333, 8, 2, 128, 3, 0, {}, true, false, false, false, 30.0f,
     DType::kI8},
    {"int8_rows20_paged_alibi", Layout::kBNSD, 2, 5, 517, 8, 2, 96, 0, 64, {}, true, true, true, false, 0.0f, DType::kI8},
    {"int8_rows32_head_dim_32_dropout", Layout::kBNSD, 1, 4, 300, 16, 2, 32, 2, 0, {}, false, false, false, true, 0.0f,
     DType::kI8},
    {"int8_bsh_heads_together_paged_lengths", Layout::kBSH, 2, 1, 700, 64, 8, 64, 0, 64, {700, 45}, false, true, false,
     false, 0.0f, DType::kI8},
    {"int8_group8_head_dim_256", Layout::kBNSD, 1, 1, 270, 16, 2, 256, 0, 0, {}, false, false, false, false, 0.0f,
     DType::kI8},
    // Longer queries whose group fills one 256-row tile (64 queries of 4
    // heads), and a quantized cache at any length, with or without a group:
    // 40 rows of one head, 100 queries of 4 heads (two tiles of a group).
    {"group4_rows256_causal", Layout::kBNSD, 1, 64, 300, 8, 2, 128, 0, 0, {}, true, false, false, false, 0.0f},
    {"int8_no_group_rows40_causal_sinks", Layout::kBNSD, 2, 40, 333, 2, 2, 128, 0, 0, {}, true, true, false, false, 0.0f,
     DType::kI8},
    {"fp8_e4m3_group4_rows400_paged", Layout::kBNSD, 1, 100, 517, 8, 2, 96, 0, 64, {}, false, false, false, false, 0.0f,
     DType::kFP8E4M3},
    {"fp8_e5m2_bsh_rows128_causal_alibi", Layout::kBSH, 1, 64, 300, 4, 2, 64, 0, 0, {}, true, false, true, false, 0.0f,
     DType::kFP8E5M2},
    // A head's 2 to 64 queries with no group (bf16) take the tile too, alone.
    {"no_group_rows5_paged_alibi_sinks", Layout::kBNSD, 2, 5, 517, 4, 4, 96, 0, 64, {}, true, true, true, false, 0.0f},
    {"no_group_bsh_rows64_softcap_dropout", Layout::kBSH, 1, 64, 333, 4, 4, 64, 0, 0, {}, false, false, false, true,
     30.0f},
    {"fp16_spec_group8_rows16_tail", Layout::kBNSD, 2, 2, 1000, 16, 2, 128, 0, 0, {}, false, false, false, false, 0.0f,
     DType::kF16, DType::kF16},
    {"fp16_bsh_rows24_paged_causal_softcap", Layout::kBSH, 1, 3, 333, 16, 2, 64, 0, 64, {}, true, false, false, false,
     30.0f, DType::kF16, DType::kF16},
    {"fp16_rows32_head_dim_96_cache_lengths_alibi_dropout", Layout::kBNSD, 3, 4, 700, 16, 2, 96, 0, 0, {700, 5, 333},
     false, true, true, true, 0.0f, DType::kF16, DType::kF16},
    {"fp16_group8_tile16_last_rows8", Layout::kBNSD, 1, 3, 300, 16, 2, 128, 2, 0, {}, false, false, false, false, 0.0f,
     DType::kF16, DType::kF16, 16},
    {"fp16_group4_rows12_head_dim_256", Layout::kBNSD, 1, 3, 270, 8, 2, 256, 0, 0, {}, true, false, false, false, 0.0f,
     DType::kF16, DType::kF16},
    // A paged cache of 16-token blocks: 32-key tiles over two blocks (bf16
    // in place, an int8 cache's codes and scales gathered, FP8 and fp16
    // widened), the sequences' ends inside a block.
    {"paged16_bsh_heads_together_lengths", Layout::kBSH, 2, 1, 700, 32, 8, 64, 0, 16, {700, 45}, false, true, false,
     false, 0.0f},
    {"int8_paged16_bsh_decode_lengths_softcap", Layout::kBSH, 2, 1, 333, 64, 8, 128, 0, 16, {333, 77}, false, false,
     false, false, 30.0f, DType::kI8},
    {"fp8_e4m3_paged16_spec_group4_causal_alibi", Layout::kBNSD, 1, 3, 300, 8, 2, 128, 2, 16, {}, true, false, true,
     false, 0.0f, DType::kFP8E4M3},
    {"no_group_paged16_rows40_tile16_causal_sinks", Layout::kBNSD, 2, 40, 333, 2, 2, 128, 0, 16, {}, true, true, false,
     false, 0.0f, DType::kBF16, DType::kBF16, 16},
    {"fp16_paged16_bsh_rows12_causal_sinks", Layout::kBSH, 1, 3, 333, 16, 4, 64, 0, 16, {}, true, true, false, false,
     0.0f, DType::kF16, DType::kF16},
    // fp16 groups of up to 512 rows share packed tiles: 64 queries of 8 heads.
    {"fp16_group8_rows512_causal_sinks", Layout::kBNSD, 1, 64, 300, 16, 2, 128, 0, 0, {}, true, true, false, false, 0.0f,
     DType::kF16, DType::kF16},
};

class KvRows : public ::testing::TestWithParam<int> {};

TEST_P(KvRows, MatchesFloat64Reference) {
  SKIP_UNLESS_AVAILABLE(fa::Isa::kAmx);
  if (kFa1) GTEST_SKIP() << "FA1 runs the vector loop on every path";
  const KvRowsCase& k = kKvRowsCases[GetParam()];
  CaseSpec c;
  c.dtype = k.dtype;
  c.layout = k.layout;
  c.mask = k.causal ? MaskMode::kCausal : MaskMode::kNone;
  c.seed = 4242u + static_cast<std::uint32_t>(GetParam());
  c.paged_block_size = k.paged_block_size;
  c.cache_seqlens_kv = k.cache_seqlens_kv;
  c.with_sinks = k.sinks;
  c.with_alibi = k.alibi;
  if (k.kv_dtype != k.dtype) c.kv_dtype = k.kv_dtype;
  fa::AttentionParams& p = c.params;
  p.batch = k.batch;
  p.seq_q = k.seq_q;
  p.seq_kv = k.seq_kv;
  p.num_heads = k.heads;
  p.num_kv_heads = k.kv_heads;
  p.head_dim = k.head_dim;
  p.num_splits = k.splits > 0 ? k.splits : fa::kSplitsAuto;
  if (k.tile_q > 0) {
    p.tile_q = k.tile_q;
    p.tile_kv = fa::kTileAuto;
  }
  p.softcap = k.softcap;
  if (k.dropout) {
    p.keep_prob = 0.9f;
    p.dropout_seed = 11;
  }
  p.threads = 2;
  p.kv_heads_side_by_side = k.layout != Layout::kBNSD;  // as the call sets it from the strides
  p.isa = fa::Isa::kAmx;  // the plan of the amx path, whatever path this CPU or build would pick
  fa::TilePlan plan;
  ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, c.dtype, k.kv_dtype, &plan).ok());
  EXPECT_TRUE(plan.pack_tile) << "the case should run a packed GQA tile";
  EXPECT_EQ(plan.pack_gqa, k.layout == Layout::kBNSD ? k.heads / k.kv_heads : k.heads) << "heads an item holds";
  if (k.paged_block_size == 16) {  // the plan of the paged call: 32 keys over two blocks
    fa::AttentionParams paged = p;
    paged.block_size = 16;
    paged.max_blocks_per_seq = (p.seq_kv + 15) / 16;
    paged.kv_num_blocks = p.batch * paged.max_blocks_per_seq;
    const std::vector<std::int32_t> table(static_cast<std::size_t>(paged.kv_num_blocks), 0);
    paged.block_table = table.data();
    fa::TilePlan paged_plan;
    const fa::Status s = fa::plan(fa::cli::kVersion, paged, c.dtype, k.kv_dtype, &paged_plan);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(paged_plan.tile_kv, 32);
  }
  // fp16 in two bf16 pieces loses only the dropped lo x lo products (below
  // 2^-14 of each): O's error is its own rounding to fp16 (about 2e-4), so
  // a piece's product left out shows against a bound tighter than fp16's
  // 2e-3: 3.4e-3 to 4e-3 in every item, 9e-4 in the one 8-row item of 24.
  expect_matches_reference(c, fa::Isa::kAmx, k.dtype == DType::kF16 ? 5e-4 : 0.0);
}


INSTANTIATE_TEST_SUITE_P(AmxEngine, KvRows, ::testing::Range(0, static_cast<int>(std::size(kKvRowsCases))),
                         [](const auto& info) { return std::string("amx_") + kKvRowsCases[info.param].name; });

// Windows whose edges cut through tiles, on shapes every path runs through
// its tile path (head_dim 64, tiles of 32 keys or more): the tile loops (the
// pair path and the FMA loop) skip the keys a block of query rows cannot
// attend (KeySpan), so narrow bands
// (row blocks with no key in a tile), wide bands, both causal alignments
// with seq_q != seq_kv (rows with no key at all), the band of mode 0 with an
// explicit mask, and a GQA group with several threads.
struct WindowCase {
  const char* name;
  std::int64_t seq_q, seq_kv;
  fa::SparseMode mode;
  std::int64_t pre, next;
  MaskMode mask;
  int tile_q, tile_kv;
};
const WindowCase kWindowCases[] = {
    {"narrow_band", 300, 300, fa::SparseMode::kBand, 5, 3, MaskMode::kNone, 128, 64},
    {"band_past_only", 260, 330, fa::SparseMode::kBand, 100, 0, MaskMode::kNone, 64, 128},
    {"causal_top_left_more_queries", 200, 150, fa::SparseMode::kCausalTopLeft, fa::kUnboundedTokens,
     fa::kUnboundedTokens, MaskMode::kNone, 128, 64},
    {"causal_bottom_right_more_keys", 150, 300, fa::SparseMode::kCausalBottomRight, fa::kUnboundedTokens,
     fa::kUnboundedTokens, MaskMode::kNone, 64, 64},
    {"causal_bottom_right_more_queries", 300, 140, fa::SparseMode::kCausalBottomRight, fa::kUnboundedTokens,
     fa::kUnboundedTokens, MaskMode::kNone, 128, 128},
    {"band_and_mask", 190, 210, fa::SparseMode::kMaskAndBand, 40, 40, MaskMode::kExplicit, 64, 32},
};

class WindowEdges : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

TEST_P(WindowEdges, MatchesFloat64Reference) {
  const auto [isa, dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  const WindowCase& w = kWindowCases[index];
  CaseSpec c;
  c.dtype = dtype;
  c.mask = w.mask;
  c.seed = 4242u + static_cast<std::uint32_t>(index);
  fa::AttentionParams& p = c.params;
  p.batch = 2;
  p.seq_q = w.seq_q;
  p.seq_kv = w.seq_kv;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.tile_q = w.tile_q;
  p.tile_kv = w.tile_kv;
  p.threads = 3;
  p.sparse_mode = w.mode;
  p.pre_tokens = w.pre;
  p.next_tokens = w.next;
  expect_matches_reference(c, isa);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, WindowEdges,
                         ::testing::Combine(kPaths, kDtypes,
                                            ::testing::Range(0, static_cast<int>(std::size(kWindowCases)))),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" +
                                  kWindowCases[std::get<2>(info.param)].name;
                         });

// A direct call with chosen inputs; returns O as float and the LSE.
struct ForwardRun {
  std::vector<float> out, lse;
};

ForwardRun run_forward(fa::AttentionParams p, fa::Isa isa, DType dtype, std::vector<float> q, std::vector<float> k,
                std::vector<float> v, Layout layout = Layout::kBSH) {
  const std::size_t es = fa::dtype_size(dtype);
  const DType o_dtype = fa::is_fp8(dtype) ? DType::kBF16 : dtype;  // FP8 inputs (FA3): O in bf16
  fa::cli::HostBuffer qb(q.size() * es), kb(k.size() * es), vb(v.size() * es), ob(q.size() * fa::dtype_size(o_dtype));
  for (std::size_t i = 0; i < q.size(); ++i) fa::detail::store_from_f32(qb.data(), dtype, i, q[i]);
  for (std::size_t i = 0; i < k.size(); ++i) fa::detail::store_from_f32(kb.data(), dtype, i, k[i]);
  for (std::size_t i = 0; i < v.size(); ++i) fa::detail::store_from_f32(vb.data(), dtype, i, v[i]);
  fa::AttentionTensors t;
  t.q = fa::make_view(qb.data(), dtype, layout, p.batch, p.num_heads, p.seq_q, p.head_dim);
  t.k = fa::make_view(kb.data(), dtype, layout, p.batch, p.kv_heads(), p.seq_kv, p.head_dim);
  t.v = fa::make_view(vb.data(), dtype, layout, p.batch, p.kv_heads(), p.seq_kv, p.head_dim);
  t.o = fa::make_view(ob.data(), o_dtype, Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
  p.isa = isa;
  if (kFa1) p.tile_q = p.tile_kv = 0;  // its fixed 64 x 64
  ForwardRun r;
  r.lse.assign(static_cast<std::size_t>(p.batch * p.num_heads * p.seq_q), 0.0f);
  t.lse = r.lse.data();
  const fa::Status s = fa::cli::kForward(p, t);
  EXPECT_TRUE(s.ok()) << s.message();
  r.out.resize(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) r.out[i] = fa::detail::load_as_f32(ob.data(), o_dtype, i);
  return r;
}

std::vector<float> normal(std::size_t n, std::uint64_t seed, double scale) {
  std::vector<float> x(n);
  fa::cli::NormalRng rng(seed);
  for (auto& e : x) e = static_cast<float>(rng.next() * scale);
  return x;
}

class EdgeCases : public ::testing::TestWithParam<std::tuple<fa::Isa, DType>> {
 protected:
  void SetUp() override { SKIP_UNLESS_AVAILABLE(isa()); }
  fa::Isa isa() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
};

TEST_P(EdgeCases, FullyMaskedRowsAreZeroWithMinusInfLse) {
  fa::AttentionParams p;
  p.seq_q = 70;
  p.seq_kv = 40;
  p.num_heads = 2;
  p.head_dim = 32;
  p.tile_q = 16;
  p.tile_kv = 16;
  std::vector<std::int8_t> mask(p.seq_q * p.seq_kv, 1);
  for (std::int64_t j = 0; j < p.seq_kv; ++j) mask[65 * p.seq_kv + j] = 0;  // row 65: explicit, all masked
  p.mask = mask.data();
  p.causal = true;  // rows 0..29 see no key (seq_q > seq_kv, bottom-right)
  const std::size_t nq = p.seq_q * p.num_heads * p.head_dim, nkv = p.seq_kv * p.num_heads * p.head_dim;
  const ForwardRun r = run_forward(p, isa(), dtype(), normal(nq, 1, 1), normal(nkv, 2, 1), normal(nkv, 3, 1));
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    const bool dead = i < 30 || i == 65;
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      const float lse = r.lse[h * p.seq_q + i];
      for (std::int64_t d = 0; d < p.head_dim; ++d) {
        const float o = r.out[(i * p.num_heads + h) * p.head_dim + d];
        ASSERT_FALSE(std::isnan(o)) << "row " << i;
        if (dead) {
          ASSERT_EQ(o, 0.0f) << "row " << i;
        }
      }
      if (dead) {
        EXPECT_EQ(lse, -std::numeric_limits<float>::infinity()) << "row " << i;
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << "row " << i;
      }
    }
  }
}

// The NaN rule (README): a NaN in Q row i makes output row i NaN; a NaN in K
// or V row j makes NaN every row that may attend key j, its LSE too for K;
// -inf in a bias masks.  Rows a NaN cannot reach match the reference.
// Rows that may not attend key j can show V's NaN only where they share its
// K/V tile (the product multiplies their zero probabilities by it).
struct NanCase {
  char tensor;           // 'Q', 'K', 'V' or 'B' (the bias)
  std::int64_t row;      // its sequence position (query row for Q and B, key for K and V)
  bool causal;
  std::int64_t seq_q;    // 1 runs the row path
  int splits;
};

// The shape of the NaN cases: 128 keys, 4 query heads over 2 K/V heads
// (head 1 is in K/V head 0's group), head_dim 32.
constexpr std::int64_t kNanSeqKv = 128, kNanHeads = 4, kNanKvHeads = 2, kNanHeadDim = 32;
fa::AttentionParams nan_case_params(std::int64_t seq_q) {
  fa::AttentionParams p;
  p.seq_q = seq_q;
  p.seq_kv = kNanSeqKv;
  p.num_heads = kNanHeads;
  p.num_kv_heads = kNanKvHeads;
  p.head_dim = kNanHeadDim;
  return p;
}

class NonFiniteInputs : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, int>> {};

const NanCase kNanCases[] = {
    {'Q', 37, false, 64, 1}, {'K', 40, true, 64, 1}, {'V', 40, true, 64, 1}, {'K', 70, false, 1, 1},
    {'V', 10, false, 64, 3}, {'B', 21, true, 64, 1}, {'K', 100, true, 64, 4},
};

TEST_P(NonFiniteInputs, NanPropagatesToTheRowsItTouches) {
  const auto [isa, dtype, index] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  const NanCase& nc = kNanCases[index];
  if (kFa1 && nc.splits > 1) GTEST_SKIP() << "FA1 has no split-KV";
  if (fa::is_fp8(dtype) && fa::cli::kVersion != fa::Version::kFA3) GTEST_SKIP() << "FP8 inputs are FA3's";
  const std::int64_t Sq = nc.seq_q, Skv = kNanSeqKv, H = kNanHeads, Hkv = kNanKvHeads, D = kNanHeadDim;
  fa::AttentionParams p = nan_case_params(Sq);
  p.causal = nc.causal;
  p.tile_q = kFa1 ? 0 : 32;
  p.tile_kv = kFa1 ? 0 : 32;
  p.num_splits = nc.splits;
  p.isa = isa;
  std::vector<float> q = normal(Sq * H * D, 21, 1), k = normal(Skv * Hkv * D, 22, 1), v = normal(Skv * Hkv * D, 23, 1);
  std::vector<float> bias(static_cast<std::size_t>(Sq * Skv), 0.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Head 1 of Q (group 0), K/V head 0 (heads 0 and 1); BSH rows.
  if (nc.tensor == 'Q') q[(nc.row * H + 1) * D + 5] = nan;
  if (nc.tensor == 'K') k[(nc.row * Hkv + 0) * D + 5] = nan;
  if (nc.tensor == 'V') v[(nc.row * Hkv + 0) * D + 5] = nan;
  if (nc.tensor == 'B') {
    bias[nc.row * Skv + 3] = nan;
    for (std::int64_t j = 0; j < Skv; j += 7) bias[(nc.row + 1) * Skv + j] = -std::numeric_limits<float>::infinity();
    p.bias = bias.data();
    p.bias_heads = 1;
  }
  const ForwardRun r = run_forward(p, isa, dtype, q, k, v);
  // The reference on the same inputs (rounded to the dtype) knows which rows a
  // NaN reaches: they are NaN there, and every other row is compared.
  const std::size_t es = fa::dtype_size(dtype);
  fa::cli::HostBuffer qb(q.size() * es), kb(k.size() * es), vb(v.size() * es);
  for (std::size_t i = 0; i < q.size(); ++i) fa::detail::store_from_f32(qb.data(), dtype, i, q[i]);
  for (std::size_t i = 0; i < k.size(); ++i) fa::detail::store_from_f32(kb.data(), dtype, i, k[i]);
  for (std::size_t i = 0; i < v.size(); ++i) fa::detail::store_from_f32(vb.data(), dtype, i, v[i]);
  fa::AttentionTensors t;
  t.q = fa::make_view(qb.data(), dtype, Layout::kBSH, 1, H, Sq, D);
  t.k = fa::make_view(kb.data(), dtype, Layout::kBSH, 1, Hkv, Skv, D);
  t.v = fa::make_view(vb.data(), dtype, Layout::kBSH, 1, Hkv, Skv, D);
  std::vector<double> ref(q.size()), ref_lse(static_cast<std::size_t>(H * Sq));
  ASSERT_TRUE(fa::reference_forward(p, t, ref.data(), ref_lse.data()).ok());
  int nan_rows = 0;
  double err2 = 0, ref2 = 0;
  for (std::int64_t h = 0; h < H; ++h) {
    for (std::int64_t i = 0; i < Sq; ++i) {
      // Which elements a NaN of each tensor must reach, by the rule itself
      // (the reference is checked against it too): the whole row for Q, K
      // and the bias, V's column for V.
      const std::int64_t last_key = nc.causal ? i + Skv - Sq : Skv - 1;  // bottom-right causal
      const bool attends = h < 2 && nc.row <= last_key;
      bool row_reached = false;
      for (std::int64_t d = 0; d < D; ++d) {
        const std::size_t at = static_cast<std::size_t>((i * H + h) * D + d);
        const bool reached = std::isnan(ref[at]);
        bool expected = false;
        if (nc.tensor == 'Q' || nc.tensor == 'B') expected = i == nc.row && (nc.tensor == 'B' || h == 1);
        if (nc.tensor == 'K') expected = attends;
        if (nc.tensor == 'V') expected = attends && d == 5;
        ASSERT_EQ(reached, expected) << "reference, head " << h << " row " << i << " dim " << d;
        row_reached = row_reached || reached;
        const float o = r.out[at];
        if (reached) {
          ASSERT_TRUE(std::isnan(o)) << "head " << h << " row " << i << " dim " << d;
          continue;
        }
        if (nc.tensor == 'V' && h < 2 && d == 5 && std::isnan(o)) {
          // Allowed only in the NaN key's K/V tile: this row's window reaches it.
          ASSERT_GE(last_key, nc.row / 32 * 32) << "head " << h << " row " << i;
          continue;
        }
        ASSERT_TRUE(std::isfinite(o)) << "head " << h << " row " << i << " dim " << d;
        err2 += (o - ref[at]) * (o - ref[at]);
        ref2 += ref[at] * ref[at];
      }
      nan_rows += row_reached;
      // The LSE of a row whose scores a NaN reached (V's does not touch them).
      if (row_reached && nc.tensor != 'V') {
        EXPECT_TRUE(std::isnan(r.lse[h * Sq + i])) << "LSE, head " << h << " row " << i;
      } else {
        EXPECT_TRUE(std::isfinite(r.lse[h * Sq + i])) << "LSE, head " << h << " row " << i;
      }
    }
  }
  EXPECT_GT(nan_rows, 0);
  EXPECT_LE(std::sqrt(err2 / ref2), fa::cli::rel_l2_bound(dtype));
}

std::string nan_case_name(const ::testing::TestParamInfo<std::tuple<fa::Isa, DType, int>>& info) {
  const NanCase& nc = kNanCases[std::get<2>(info.param)];
  return std::string(fa::isa_name(std::get<0>(info.param))) + "_" + std::string(fa::dtype_name(std::get<1>(info.param))) +
         "_" + nc.tensor + std::to_string(nc.row) + (nc.causal ? "_causal" : "") + (nc.seq_q == 1 ? "_decode" : "") +
         (nc.splits > 1 ? "_split" : "");
}
const auto kNanCaseIndices = ::testing::Range(0, static_cast<int>(std::size(kNanCases)));
INSTANTIATE_TEST_SUITE_P(AllPaths, NonFiniteInputs, ::testing::Combine(kPaths, kDtypes, kNanCaseIndices), nan_case_name);
// FP8 inputs (FA3): the NaN codes (e4m3's S.1111.111, e5m2's) through every
// path's widening, the pair engines' exact bf16 one included.
INSTANTIATE_TEST_SUITE_P(Fp8, NonFiniteInputs,
                         ::testing::Combine(kPaths, ::testing::Values(DType::kFP8E4M3, DType::kFP8E5M2), kNanCaseIndices),
                         nan_case_name);

// The NaN rule through a quantized cache: a NaN in K or V key 70 of K/V
// head 0 (int8: its row's scale turns NaN; FP8: the NaN code; head_dim 96,
// K's NaN in the first 64 bytes of its row, V's in the last 32, the two
// parts of the row path's e4m3 scan on AVX-512; and head_dim 128, where
// FP8 takes the pair products' byte tables), or in query 0 of head 0
// (which the int8 row path's integer products cannot carry: its item takes
// the fp32 products, the other heads packed with it still right), reaches
// exactly the output elements the reference on the dequantized cache says,
// on the row path (decoding, where e4m3 tiles holding the NaN code are
// widened exactly), on a packed GQA tile of 8 rows (4 queries of 2 heads:
// the amx engine's rows widened from an int8 or FP8 cache) and on the tile
// loops; every other element matches.
class QuantizedCacheNan : public ::testing::TestWithParam<std::tuple<fa::Isa, DType, char, int>> {};

TEST_P(QuantizedCacheNan, ReachesWhatTheReferenceSays) {
  const auto [isa, kv_dtype, tensor, seq_q] = GetParam();
  SKIP_UNLESS_AVAILABLE(isa);
  if (kFa1) GTEST_SKIP() << "FA1 has no quantized cache";
  for (const std::int64_t D : {96, 128}) {
  SCOPED_TRACE("head_dim " + std::to_string(D));
  const std::int64_t Sq = seq_q, Skv = kNanSeqKv, H = kNanHeads, Hkv = kNanKvHeads;
  const std::int64_t nan_dim = tensor == 'V' ? 70 : 5;
  fa::AttentionParams p = nan_case_params(Sq);
  p.head_dim = D;
  p.tile_q = p.tile_kv = 32;
  p.isa = isa;
  std::vector<float> q = normal(Sq * H * D, 31, 1), k = normal(Skv * Hkv * D, 32, 1), v = normal(Skv * Hkv * D, 33, 1);
  if (tensor == 'Q') {
    q[nan_dim] = std::numeric_limits<float>::quiet_NaN();  // query 0, head 0
  } else {
    (tensor == 'K' ? k : v)[(70 * Hkv + 0) * D + nan_dim] = std::numeric_limits<float>::quiet_NaN();
  }
  fa::cli::HostBuffer qb(q.size() * 2), ob(q.size() * 2);
  for (std::size_t i = 0; i < q.size(); ++i) fa::detail::store_from_f32(qb.data(), DType::kBF16, i, q[i]);
  fa::AttentionTensors t;
  t.q = fa::make_view(qb.data(), DType::kBF16, Layout::kBSH, 1, H, Sq, D);
  t.o = fa::make_view(ob.data(), DType::kBF16, Layout::kBSH, 1, H, Sq, D);
  fa::cli::QuantizedCache cache;
  ASSERT_TRUE(fa::cli::quantize_cache(fa::make_view(k.data(), DType::kF32, Layout::kBSH, 1, Hkv, Skv, D),
                                      fa::make_view(v.data(), DType::kF32, Layout::kBSH, 1, Hkv, Skv, D), Layout::kBSH,
                                      kv_dtype, &cache)
                  .ok());
  cache.bind(p, t);
  ASSERT_TRUE(fa::cli::kForward(p, t).ok());
  std::vector<double> ref(q.size());
  ASSERT_TRUE(fa::reference_forward(p, t, ref.data(), nullptr).ok());
  std::int64_t nan_elements = 0;
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double o = fa::detail::load_as_f32(ob.data(), DType::kBF16, static_cast<std::int64_t>(i));
    const std::int64_t head = static_cast<std::int64_t>(i) / D % H, dim = static_cast<std::int64_t>(i) % D;
    if (std::isnan(ref[i])) {
      ++nan_elements;
      ASSERT_TRUE(std::isnan(o)) << "element " << i;
      continue;
    }
    // (V's NaN may also reach, through a zero probability, a row's column
    // nan_dim of its K/V head, as in NonFiniteInputs; int8 turns the whole
    // row NaN.)
    if (tensor == 'V' && head < 2 && (dim == nan_dim || kv_dtype == DType::kI8) && std::isnan(o)) continue;
    ASSERT_TRUE(std::isfinite(o)) << "element " << i;
    err2 += (o - ref[i]) * (o - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  EXPECT_GT(nan_elements, 0);
  EXPECT_LE(std::sqrt(err2 / ref2), fa::cli::rel_l2_bound(DType::kBF16));
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, QuantizedCacheNan,
                         ::testing::Combine(kPaths, ::testing::Values(DType::kI8, DType::kFP8E4M3, DType::kFP8E5M2),
                                            ::testing::Values('Q', 'K', 'V'), ::testing::Values(1, 4, 64)),
                         [](const auto& info) {
                           const int seq_q = std::get<3>(info.param);
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param))) + "_" + std::get<2>(info.param) +
                                  (seq_q == 1 ? "_decode" : seq_q == 4 ? "_packed_rows" : "_tiles");
                         });

// A NaN and an Inf in V on the amx engine's rows (bf16 cache read in place,
// or fp16 widened into two bf16 pieces; K/V heads together or not): the
// products take V's dim pairs whole, so each non-finite value is taken out
// of them and added back to its own dim; every other output element stays
// finite and within the bound.  fp16 at 2 queries (16 rows a K/V head: the
// row path keeps 8).
class KvRowsNonFiniteV : public ::testing::TestWithParam<std::tuple<Layout, DType>> {};

TEST_P(KvRowsNonFiniteV, ReachesWhatTheReferenceSays) {
  SKIP_UNLESS_AVAILABLE(fa::Isa::kAmx);
  if (kFa1) GTEST_SKIP() << "FA1 runs the vector loop on every path";
  const auto [layout, dtype] = GetParam();
  const std::int64_t B = 1, Sq = dtype == DType::kF16 ? 2 : 1, Skv = 300, H = 16, Hkv = 2, D = 64;
  fa::AttentionParams p;
  p.batch = B;
  p.seq_q = Sq;
  p.seq_kv = Skv;
  p.num_heads = H;
  p.num_kv_heads = Hkv;
  p.head_dim = D;
  p.threads = 2;
  p.isa = fa::Isa::kAmx;
  p.kv_heads_side_by_side = layout != Layout::kBNSD;
  fa::TilePlan plan;
  ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype, &plan).ok());
  ASSERT_TRUE(plan.pack_tile);
  std::vector<float> q = normal(static_cast<std::size_t>(B * Sq * H * D), 41, 1),
                     k = normal(static_cast<std::size_t>(B * Skv * Hkv * D), 42, 1),
                     v = normal(static_cast<std::size_t>(B * Skv * Hkv * D), 43, 1);
  // (the buffers hold [b][h][s][d] for BNSD, [b][s][h][d] for BSH: an
  // element is found through its view's offset)
  fa::cli::HostBuffer qb(q.size() * 2), kb(k.size() * 2), vb(v.size() * 2), ob(q.size() * 2);
  fa::AttentionTensors t;
  t.q = fa::make_view(qb.data(), dtype, layout, B, H, Sq, D);
  t.k = fa::make_view(kb.data(), dtype, layout, B, Hkv, Skv, D);
  t.v = fa::make_view(vb.data(), dtype, layout, B, Hkv, Skv, D);
  t.o = fa::make_view(ob.data(), dtype, layout, B, H, Sq, D);
  for (std::size_t i = 0; i < q.size(); ++i) fa::detail::store_from_f32(qb.data(), dtype, i, q[i]);
  for (std::size_t i = 0; i < k.size(); ++i) fa::detail::store_from_f32(kb.data(), dtype, i, k[i]);
  for (std::size_t i = 0; i < v.size(); ++i) fa::detail::store_from_f32(vb.data(), dtype, i, v[i]);
  const std::int64_t nan_at = t.v.offset(0, 0, 70, 20), inf_at = t.v.offset(0, 1, 201, 33);
  fa::detail::store_from_f32(vb.data(), dtype, nan_at, std::numeric_limits<float>::quiet_NaN());
  fa::detail::store_from_f32(vb.data(), dtype, inf_at, std::numeric_limits<float>::infinity());
  ASSERT_TRUE(fa::cli::kForward(p, t).ok());
  std::vector<double> ref(q.size());  // [b][s][h][d]
  ASSERT_TRUE(fa::reference_forward(p, t, ref.data(), nullptr).ok());
  std::int64_t nonfinite = 0;
  double err2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < Sq; ++i) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t d = 0; d < D; ++d) {
        const double r = ref[static_cast<std::size_t>((i * H + h) * D + d)];
        const double o = fa::detail::load_as_f32(ob.data(), dtype, t.o.offset(0, h, i, d));
        const std::string where = "query " + std::to_string(i) + " head " + std::to_string(h) + " dim " + std::to_string(d);
        if (!std::isfinite(r)) {
          ++nonfinite;
          EXPECT_TRUE(std::isnan(r) ? std::isnan(o) : o == r) << where;
          continue;
        }
        ASSERT_TRUE(std::isfinite(o)) << where;
        err2 += (o - r) * (o - r);
        ref2 += r * r;
      }
    }
  }
  EXPECT_EQ(nonfinite, 2 * Sq * (H / Hkv));  // dim 20 of K/V head 0's heads, dim 33 of head 1's
  EXPECT_LE(std::sqrt(err2 / ref2), fa::cli::rel_l2_bound(dtype));
}

INSTANTIATE_TEST_SUITE_P(AmxEngine, KvRowsNonFiniteV,
                         ::testing::Combine(::testing::Values(Layout::kBNSD, Layout::kBSH),
                                            ::testing::Values(DType::kBF16, DType::kF16)),
                         [](const auto& info) {
                           return std::string("amx_") + std::string(fa::layout_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param)));
                         });

TEST_P(EdgeCases, HugeLogitsStayFinite) {
  // Q and K entries of about 100 give logits of order 1e4 and more: exp
  // without the max subtraction would overflow fp16 (and fp32) at once.
  fa::AttentionParams p;
  p.seq_q = 64;
  p.seq_kv = 96;
  p.num_heads = 2;
  p.head_dim = 64;
  p.tile_kv = 32;
  const std::size_t nq = p.seq_q * p.num_heads * p.head_dim, nkv = p.seq_kv * p.num_heads * p.head_dim;
  const auto v = normal(nkv, 6, 1);
  const ForwardRun r = run_forward(p, isa(), dtype(), normal(nq, 4, 100), normal(nkv, 5, 100), v);
  float vmax = 0;
  for (float x : v) vmax = std::max(vmax, std::abs(x));
  for (float o : r.out) {
    ASSERT_TRUE(std::isfinite(o));
    ASSERT_LE(std::abs(o), vmax * 1.01f);  // a convex combination of V rows
  }
  for (float l : r.lse) ASSERT_TRUE(std::isfinite(l));
}

// Row maxima that rise from tile to tile, by a little (the amx path keeps
// its running max while a tile exceeds it by at most 2^8, with probabilities
// up to 256) and by a lot (it must then move the max and rescale O), against
// a float64 softmax computed here.
TEST_P(EdgeCases, RowMaxRisingAcrossTiles) {
  fa::AttentionParams p;
  p.seq_q = 40;
  p.seq_kv = 8 * 32;
  p.num_heads = 1;
  p.head_dim = 64;
  p.tile_q = 32;
  p.tile_kv = 32;
  p.scale = 1.0f;
  const int D = 64;
  std::vector<float> q = normal(std::size_t(p.seq_q) * D, 7, 0.05), k = normal(std::size_t(p.seq_kv) * D, 8, 0.05);
  const std::vector<float> v = normal(std::size_t(p.seq_kv) * D, 9, 1);
  for (std::int64_t i = 0; i < p.seq_q; ++i) q[i * D] = 1.0f;  // every score ~ K[j][0]
  // Natural-log steps of the tile's largest score: +2 (kept: under 8 log2
  // units), +4, +3, then +100 (must move the max: 2^144 overflows fp32), +1,
  // +15, then down.  The largest logits stay small, so fp32 rounding of the
  // scores stays below the fp32 bound.
  const float level[8] = {-109.0f, -107.0f, -103.0f, -100.0f, 0.0f, 1.0f, 16.0f, -80.0f};
  for (std::int64_t j = 0; j < p.seq_kv; ++j) k[j * D] = level[j / 32] - 0.05f * static_cast<float>(j % 32);
  const ForwardRun r = run_forward(p, isa(), dtype(), q, k, v);
  // The float64 softmax of the inputs as the kernel saw them (rounded to the dtype).
  auto rounded = [&](float x) {
    std::uint32_t bits[1];
    fa::detail::store_from_f32(bits, dtype(), 0, x);
    return static_cast<double>(fa::detail::load_as_f32(bits, dtype(), 0));
  };
  double err2 = 0, ref2 = 0, lse_err = 0;
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    std::vector<double> s(p.seq_kv);
    double m = -1e300;
    for (std::int64_t j = 0; j < p.seq_kv; ++j) {
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += rounded(q[i * D + d]) * rounded(k[j * D + d]);
      s[j] = dot;
      m = std::max(m, dot);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - m));
    lse_err = std::max(lse_err, std::abs(double(r.lse[i]) - (m + std::log(sum))) / (1.0 + std::abs(m + std::log(sum))));
    for (int d = 0; d < D; ++d) {
      double o = 0;
      for (std::int64_t j = 0; j < p.seq_kv; ++j) o += s[j] * rounded(v[j * D + d]);
      o /= sum;
      err2 += (r.out[i * D + d] - o) * (r.out[i * D + d] - o);
      ref2 += o * o;
    }
  }
  EXPECT_LE(std::sqrt(err2 / ref2), fa::cli::rel_l2_bound(dtype()));
  EXPECT_LE(lse_err, fa::cli::lse_bound(dtype()));
}

TEST_P(EdgeCases, ResultDoesNotDependOnThreadCount) {
  fa::AttentionParams p;
  p.batch = 2;
  p.seq_q = 150;
  p.seq_kv = 150;
  p.num_heads = 3;
  p.head_dim = 40;
  p.causal = true;
  p.tile_q = 32;
  p.tile_kv = 32;
  const std::size_t n = p.batch * p.seq_q * p.num_heads * p.head_dim;
  const auto q = normal(n, 7, 1), k = normal(n, 8, 1), v = normal(n, 9, 1);
  p.threads = 1;
  const ForwardRun one = run_forward(p, isa(), dtype(), q, k, v);
  p.threads = 5;
  const ForwardRun five = run_forward(p, isa(), dtype(), q, k, v);
  EXPECT_EQ(0, std::memcmp(one.out.data(), five.out.data(), one.out.size() * sizeof(float)));
}

// Short queries pack query heads into one item (every head of the batch
// with one thread, fewer with more threads when split-KV is off): however
// many heads an item holds, each row's sums run in the same order, so the
// bits are the same.  GQA 12/4 with 3 query rows (9 rows per K/V head:
// whole and partial register blocks), keys not a multiple of the blocks.
// [seq, heads, dim] (BSH, batch 1) as [heads, seq, dim] (BNSD).
std::vector<float> bsh_to_bnsd(const std::vector<float>& x, std::int64_t seq, std::int64_t heads, std::int64_t dim) {
  std::vector<float> y(x.size());
  for (std::int64_t s = 0; s < seq; ++s) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t d = 0; d < dim; ++d) y[(h * seq + s) * dim + d] = x[(s * heads + h) * dim + d];
    }
  }
  return y;
}

// An item's K/V heads read side by side (BSH: a tile for all of them) or
// head after head (BNSD: each head's whole key range in turn) give the
// same bits: each row's sums see its own head's tiles in the same order.
// The K/V tile is given: the planner's own differs between the layouts (a
// smaller one where the heads lie side by side).
TEST_P(EdgeCases, PackedShortQueriesDoNotDependOnThePacking) {
  if (kFa1) GTEST_SKIP() << "FA1 does not pack heads";
  std::vector<float> bsh_out;
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    fa::AttentionParams p;
    p.batch = 1;
    p.seq_q = 3;
    p.seq_kv = 301;
    p.num_heads = 12;
    p.num_kv_heads = 4;
    p.head_dim = 40;
    p.causal = true;
    p.num_splits = 1;
    p.tile_q = fa::kTileAuto;
    p.tile_kv = 64;
    p.isa = isa();
    const std::size_t nq = p.seq_q * p.num_heads * p.head_dim, nkv = p.seq_kv * p.num_kv_heads * p.head_dim;
    auto q = normal(nq, 17, 1), k = normal(nkv, 18, 1), v = normal(nkv, 19, 1);
    if (layout == Layout::kBNSD) {
      q = bsh_to_bnsd(q, p.seq_q, p.num_heads, p.head_dim);
      k = bsh_to_bnsd(k, p.seq_kv, p.num_kv_heads, p.head_dim);
      v = bsh_to_bnsd(v, p.seq_kv, p.num_kv_heads, p.head_dim);
    }
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2, 4}) {  // 12, then 6, then 3 query heads an item (whole GQA groups)
      p.threads = threads;
      fa::TilePlan plan;
      ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok());
      // On the bf16 pair engines a group's 3 x 3 rows form one packed tile.
      EXPECT_EQ(plan.pack_gqa, plan.pack_tile ? 3 : 12 / threads) << "threads " << threads;
      EXPECT_EQ(plan.pack_tile, fa::uses_matrix_unit(isa(), dtype(), p.head_dim)) << "threads " << threads;
      outs.push_back(run_forward(p, isa(), dtype(), q, k, v, layout).out);  // O in BSH either way
    }
    for (std::size_t i = 1; i < outs.size(); ++i) {
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * sizeof(float))) << fa::layout_name(layout);
    }
    if (layout == Layout::kBSH) bsh_out = outs[0];
    else EXPECT_EQ(0, std::memcmp(bsh_out.data(), outs[0].data(), bsh_out.size() * sizeof(float))) << "BSH against BNSD";
  }
}

// Short queries of a GQA group share one tile (TilePlan::pack_tile): its
// lanes hold every head's rows, and each row keeps its own head's sink,
// ALiBi slope, bias, dropout stream, window and output row.  A lane's sums
// run in the same order wherever its row sits, so the packed call gives the
// bits of the same call with each K/V head repeated for its query heads
// (plain multi-head attention, a tile per head).  Head_dim 40 (padded on the
// pair path) and 64 (K read in place by the dot engine), queries not a
// multiple of the lanes, a band window and a causal one, split or not, two
// layouts.
TEST_P(EdgeCases, PackedGqaTileEqualsRepeatedKvHeads) {
  if (kFa1) GTEST_SKIP() << "FA1 does not pack heads";
  const std::int64_t heads = 12, kv_heads = 3, group = heads / kv_heads, seq_kv = 157;
  std::vector<float> sinks(heads), slopes(heads);
  for (std::int64_t h = 0; h < heads; ++h) {
    sinks[h] = 0.3f * static_cast<float>(h % 5) - 0.5f;
    slopes[h] = 0.01f * static_cast<float>(h + 1);
  }
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    const std::int64_t D = layout == Layout::kBSH ? 40 : 64;
    // Two query counts a layout, 19 to 32, partial vectors and whole ones
    // (past TilePlan::row_rows: 8 for fp16 with no group, 12 for bf16 on
    // avx2, 24 for bf16 on the avx512bf16 path at head_dim 64, so the
    // repeated call runs a tile per head too).
    for (std::int64_t seq_q : layout == Layout::kBSH ? std::array{13, 32} : std::array{25, 27}) {
      for (int variant = 0; variant < 2; ++variant) {
        fa::AttentionParams p;
        p.batch = 2;
        p.seq_q = seq_q;
        p.seq_kv = seq_kv;
        p.num_heads = heads;
        p.num_kv_heads = kv_heads;
        p.head_dim = D;
        p.tile_kv = 32;
        p.threads = 2;
        p.isa = isa();
        p.kv_heads_side_by_side = layout != Layout::kBNSD;  // as the call sets it from the strides
        std::vector<float> bias;
        if (variant == 0) {  // causal, sinks, ALiBi, softcap, dropout, unsplit
          p.causal = true;
          p.sinks = sinks.data();
          p.alibi_slopes = slopes.data();
          p.softcap = 4.0f;
          p.keep_prob = 0.75f;
          p.dropout_seed = 99;
          p.num_splits = 1;
        } else {  // a band window, a per-head bias, split in three
          p.sparse_mode = fa::SparseMode::kBand;
          p.pre_tokens = 30;
          p.next_tokens = 3;
          bias = normal(static_cast<std::size_t>(heads * seq_q * seq_kv), 23, 0.5);
          p.bias = bias.data();
          p.bias_heads = heads;
          p.num_splits = 3;
        }
        const std::string where = std::string(fa::layout_name(layout)) + " seq_q " + std::to_string(seq_q) +
                                  (variant == 0 ? " causal" : " band");
        fa::TilePlan plan;
        ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok()) << where;
        ASSERT_TRUE(plan.pack_tile) << where;
        EXPECT_EQ(plan.pack_gqa, group) << where;
        EXPECT_EQ(plan.q_step, plan.tile_q / group) << where;
        // Inputs in BSH order: [batch][seq][heads][D].
        const auto q = normal(static_cast<std::size_t>(p.batch * seq_q * heads * D), 31, 1);
        const auto k = normal(static_cast<std::size_t>(p.batch * seq_kv * kv_heads * D), 32, 1);
        const auto v = normal(static_cast<std::size_t>(p.batch * seq_kv * kv_heads * D), 33, 1);
        std::vector<float> k_rep(static_cast<std::size_t>(p.batch * seq_kv * heads * D)), v_rep(k_rep.size());
        for (std::int64_t t = 0; t < p.batch * seq_kv; ++t) {
          for (std::int64_t h = 0; h < heads; ++h) {
            for (std::int64_t d = 0; d < D; ++d) {
              const std::size_t to = static_cast<std::size_t>((t * heads + h) * D + d);
              const std::size_t from = static_cast<std::size_t>((t * kv_heads + h / group) * D + d);
              k_rep[to] = k[from];
              v_rep[to] = v[from];
            }
          }
        }
        // run_forward reads the vectors in `layout`: give it BNSD order where asked.
        auto in_layout = [&](const std::vector<float>& x, std::int64_t n_heads, std::int64_t seq) {
          if (layout == Layout::kBSH) return x;
          std::vector<float> y(x.size());
          for (std::int64_t b = 0; b < p.batch; ++b)
            for (std::int64_t t = 0; t < seq; ++t)
              for (std::int64_t h = 0; h < n_heads; ++h)
                for (std::int64_t d = 0; d < D; ++d)
                  y[static_cast<std::size_t>(((b * n_heads + h) * seq + t) * D + d)] =
                      x[static_cast<std::size_t>(((b * seq + t) * n_heads + h) * D + d)];
          return y;
        };
        const ForwardRun packed = run_forward(p, isa(), dtype(), in_layout(q, heads, seq_q), in_layout(k, kv_heads, seq_kv),
                                              in_layout(v, kv_heads, seq_kv), layout);
        fa::AttentionParams mha = p;
        mha.num_kv_heads = heads;
        ASSERT_TRUE(fa::plan(fa::cli::kVersion, mha, dtype(), &plan).ok()) << where;
        // A tile per head (on the amx path a head's 2 to 64 queries with no
        // group take the packed tile too, each alone in its tile).
        ASSERT_EQ(plan.q_step, plan.tile_q) << where;
        const ForwardRun repeated = run_forward(mha, isa(), dtype(), in_layout(q, heads, seq_q),
                                                in_layout(k_rep, heads, seq_kv), in_layout(v_rep, heads, seq_kv), layout);
        EXPECT_EQ(0, std::memcmp(packed.out.data(), repeated.out.data(), packed.out.size() * sizeof(float))) << where;
        EXPECT_EQ(0, std::memcmp(packed.lse.data(), repeated.lse.data(), packed.lse.size() * sizeof(float))) << where;
        std::size_t nonfinite = 0;
        for (float x : packed.out) nonfinite += std::isfinite(x) ? 0 : 1;
        EXPECT_EQ(nonfinite, 0u) << where;
      }
    }
  }
}

// Decoding and 2-4 query rows in GQA groups of 8 rows or more take the
// packed tile on the bf16 pair engines (their multi-head twin takes the row
// path, so the bits differ: checked against the reference), the row path
// elsewhere and with a quantized cache.
TEST_P(EdgeCases, ShortGqaQueriesOnThePackedTile) {
  if (kFa1) GTEST_SKIP() << "FA1 does not pack heads";
  const bool pair_engine = fa::uses_matrix_unit(isa(), dtype(), 40);
  for (auto [seq_q, heads, layout, mask] : {std::tuple{1, 16, Layout::kBSH, MaskMode::kNone},
                                             {2, 12, Layout::kBNSD, MaskMode::kCausal},
                                             {4, 8, Layout::kBSH, MaskMode::kCausal}}) {
    CaseSpec c;
    c.dtype = dtype();
    c.seed = 300 + seq_q;
    c.layout = layout;
    c.mask = mask;
    c.with_sinks = true;
    c.with_alibi = seq_q != 1;
    c.bias_heads = seq_q == 4 ? heads : 0;
    fa::AttentionParams& p = c.params;
    p.batch = 2;
    p.seq_q = seq_q;
    p.seq_kv = 333;
    p.num_heads = heads;
    p.num_kv_heads = 2;
    p.head_dim = 40;
    p.softcap = seq_q == 2 ? 5.0f : 0.0f;
    p.num_splits = seq_q == 1 ? 3 : 1;
    p.isa = isa();
    const std::string where = "seq_q " + std::to_string(seq_q) + " heads " + std::to_string(heads);
    fa::TilePlan plan;
    ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok()) << where;
    // (fp16 on the tile unit, as two bf16 pieces, leaves 8 rows to the row path.)
    const bool fp16_pieces_rows = isa() == fa::Isa::kAmx && dtype() == DType::kF16 && seq_q * heads / 2 <= 8;
    EXPECT_EQ(plan.pack_tile, pair_engine && !fp16_pieces_rows) << where;
    if (plan.pack_tile) {
      EXPECT_EQ(plan.pack_gqa, heads / 2) << where;
    }
    if (dtype() != DType::kF32) {  // a quantized cache reads on the row path
      ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), DType::kI8, &plan).ok()) << where;
      EXPECT_FALSE(plan.pack_tile) << where;
    }
    const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.nonfinite, 0) << where;
    EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(dtype())) << fa::cli::describe(c);
    EXPECT_LE(r.lse_max_error, fa::cli::lse_bound(dtype())) << fa::cli::describe(c);
  }
}

// Decoding and short queries at head_dims that are multiples of 32, where
// bf16 on the avx512bf16 path runs the row path's VDPBF16PS products (K and
// V read in place as key pairs, P rounded to bf16, O in paired order until
// the end) for up to 24 rows a head or a GQA group (TilePlan::row_rows,
// detail::kRowPathPairGroupRows): odd key counts (a last key without a
// partner), whole K/V rows of several heads (BSH), a paged cache, splits,
// 5 to 8 and 12 to 24 rows of multi-head calls, and the score
// modifiers,
// against the float64 reference and the accuracy rule.  On every path and
// dtype, so the other row paths answer the same cases.
TEST_P(EdgeCases, ShortQueriesAtWholeVectorsOfPairs) {
  if (kFa1) GTEST_SKIP() << "FA1 has no row path";
  struct Shape {
    int seq_q, heads, kv_heads, head_dim, seq_kv, splits, block;
    Layout layout;
    MaskMode mask;
  };
  for (const Shape& s : {Shape{1, 16, 2, 128, 333, 3, 0, Layout::kBSH, MaskMode::kNone},
                         Shape{4, 8, 4, 64, 257, 1, 0, Layout::kBNSD, MaskMode::kCausal},
                         Shape{2, 8, 8, 96, 101, 2, 32, Layout::kBSH, MaskMode::kCausal},
                         Shape{3, 12, 6, 256, 71, 1, 0, Layout::kBSND, MaskMode::kNone},
                         Shape{7, 4, 4, 64, 139, 2, 0, Layout::kBSH, MaskMode::kCausal},
                         Shape{8, 2, 2, 32, 45, 1, 16, Layout::kBNSD, MaskMode::kNone},
                         Shape{12, 3, 3, 128, 203, 2, 0, Layout::kBNSD, MaskMode::kCausal},
                         Shape{16, 2, 2, 64, 77, 1, 32, Layout::kBSH, MaskMode::kNone},
                         Shape{24, 2, 2, 96, 61, 2, 0, Layout::kBSH, MaskMode::kCausal}}) {
    CaseSpec c;
    c.dtype = dtype();
    c.seed = 500 + s.head_dim;
    c.layout = s.layout;
    c.mask = s.mask;
    c.with_sinks = s.seq_q != 4;
    c.with_alibi = s.seq_q == 4;
    c.bias_heads = s.seq_q == 3 ? s.heads : 0;
    c.paged_block_size = s.block;
    c.accuracy_rule = true;
    fa::AttentionParams& p = c.params;
    p.batch = 2;
    p.seq_q = s.seq_q;
    p.seq_kv = s.seq_kv;
    p.num_heads = s.heads;
    p.num_kv_heads = s.kv_heads;
    p.head_dim = s.head_dim;
    p.softcap = s.seq_q == 2 ? 6.0f : 0.0f;
    p.keep_prob = s.seq_q == 4 ? 0.8f : 1.0f;
    p.dropout_seed = 7;
    p.num_splits = s.splits;
    p.isa = isa();
    const std::string where = "seq_q " + std::to_string(s.seq_q) + " head_dim " + std::to_string(s.head_dim);
    fa::TilePlan plan;
    ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok()) << where;
    if (isa() == fa::Isa::kAvx512Bf16 && dtype() == DType::kBF16) {  // up to 24 rows a head or a group: the row path
      EXPECT_FALSE(plan.pack_tile) << where << ": bf16 short queries take the row path's pair products here";
      EXPECT_EQ(plan.row_rows, 24) << where;
    } else {
      // fp16 with no group to pack, 16 lanes or avx2: up to 8 rows
      // (kRowPathHalfRows); bf16 with no group on avx2: up to 12
      // (kRowPathAvx2Bf16Rows).
      const bool lanes16 = isa() == fa::Isa::kAvx512 || isa() == fa::Isa::kAvx512Bf16 || isa() == fa::Isa::kAmx;
      const bool no_group = s.heads == s.kv_heads;
      const bool half_rows = (lanes16 || isa() == fa::Isa::kAvx2) && dtype() == DType::kF16 && no_group;
      const bool avx2_bf16_rows = isa() == fa::Isa::kAvx2 && dtype() == DType::kBF16 && no_group;
      EXPECT_EQ(plan.row_rows, avx2_bf16_rows ? 12 : half_rows ? 8 : 4) << where;
    }
    const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.nonfinite, 0) << where;
    EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(dtype())) << fa::cli::describe(c);
    EXPECT_LE(r.lse_max_error, fa::cli::lse_bound(dtype())) << fa::cli::describe(c);
    EXPECT_LE(r.max_abs_error, 2.0 * r.yardstick_max_abs) << fa::cli::describe(c);
  }
}

// A decoding or short-query call over a quantized cache (the row path's
// tests): batch 2, causal with more than one query row, a paged cache of
// `block` tokens a block (and K/V tiles of that size) when block > 0.
struct CacheShape {
  int seq_q, heads, kv_heads, head_dim, seq_kv, splits, block;
  Layout layout;
  double input_scale = 1.0;
};

CaseSpec cache_case(const CacheShape& s, DType dtype, DType kv_dtype, fa::Isa isa, std::uint64_t seed, bool sinks) {
  CaseSpec c;
  c.dtype = dtype;
  c.kv_dtype = kv_dtype;
  c.seed = seed;
  c.layout = s.layout;
  c.mask = s.seq_q > 1 ? MaskMode::kCausal : MaskMode::kNone;
  c.with_sinks = sinks;
  c.paged_block_size = s.block;
  c.input_scale = s.input_scale;
  fa::AttentionParams& p = c.params;
  p.batch = 2;
  p.seq_q = s.seq_q;
  p.seq_kv = s.seq_kv;
  p.num_heads = s.heads;
  p.num_kv_heads = s.kv_heads;
  p.head_dim = s.head_dim;
  p.num_splits = s.splits;
  if (s.block) p.tile_kv = s.block;
  p.isa = isa;
  return c;
}

// An int8 cache read with 16-bit Q on the row path, whose products are in
// integers on AVX-512 (Q and P as int16, VPDPWSSD): head_dims that are a
// whole number of 32-dim steps and ones whose last step is masked, odd key
// counts, GQA groups packed, paged caches, splits; then the largest sums a
// tile's int32 lanes take (512 keys of one probability against V rows at
// the int8 extreme, alternating in sign by dim), which must not wrap.
TEST_P(EdgeCases, Int8CacheOnTheRowPath) {
  if (kFa1) GTEST_SKIP() << "FA1 has no quantized cache";
  if (dtype() == DType::kF32) GTEST_SKIP() << "a quantized cache is read with fp16 or bf16 Q";
  for (const CacheShape& s : {CacheShape{1, 8, 8, 8, 77, 1, 0, Layout::kBNSD}, CacheShape{1, 32, 8, 40, 333, 3, 0, Layout::kBSH},
                              CacheShape{2, 8, 4, 80, 129, 2, 32, Layout::kBSH}, CacheShape{4, 4, 1, 96, 301, 1, 0, Layout::kBSND},
                              CacheShape{1, 16, 4, 136, 200, 1, 16, Layout::kBNSD}, CacheShape{3, 6, 2, 256, 95, 2, 0, Layout::kBSH},
                              // 5 to 8 rows of one head (fp16 Q keeps them on the row path on 16 lanes)
                              CacheShape{8, 4, 4, 128, 150, 1, 0, Layout::kBNSD}, CacheShape{6, 4, 4, 64, 99, 2, 0, Layout::kBSH}}) {
    const CaseSpec c = cache_case(s, dtype(), DType::kI8, isa(), 900 + s.head_dim, /*sinks=*/s.head_dim == 80);
    const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.nonfinite, 0) << fa::cli::describe(c);
    EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(dtype())) << fa::cli::describe(c);
    EXPECT_LE(r.lse_max_error, fa::cli::lse_bound(dtype())) << fa::cli::describe(c);
  }
  // Q and K of subnormal size (Q's int16 scale computed in double, the
  // scores 0 to fp32): still the reference's result.
  {
    CaseSpec c;
    c.dtype = dtype();
    c.kv_dtype = DType::kI8;
    c.seed = 77;
    c.input_scale = 1e-39;
    fa::AttentionParams& p = c.params;
    p.batch = 1;
    p.seq_q = 1;
    p.seq_kv = 100;
    p.num_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 64;
    p.isa = isa();
    const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.nonfinite, 0);
    EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(dtype())) << "subnormal Q and K";
  }
  // K of zeros (every score 0: one probability for all keys) and V of +-3
  // by dim: int8 codes of +-127 with a scale of 3/127, so O is +-3 exactly
  // after tiles of 512 keys whose P·V lanes sum 512 x 32767 x 127.
  const std::int64_t H = 2, Skv = 1024, D = 64;
  fa::AttentionParams p;
  p.seq_q = 1;
  p.seq_kv = Skv;
  p.num_heads = H;
  p.num_kv_heads = 1;
  p.head_dim = D;
  p.tile_kv = 512;
  p.num_splits = 1;
  p.isa = isa();
  std::vector<float> q = normal(H * D, 41, 1), k(Skv * D, 0.0f), v(Skv * D);
  for (std::int64_t i = 0; i < Skv * D; ++i) v[i] = i % 2 ? 3.0f : -3.0f;
  fa::cli::HostBuffer qb(q.size() * 2), ob(q.size() * 2);
  for (std::size_t i = 0; i < q.size(); ++i) fa::detail::store_from_f32(qb.data(), dtype(), i, q[i]);
  fa::AttentionTensors t;
  t.q = fa::make_view(qb.data(), dtype(), Layout::kBSH, 1, H, 1, D);
  t.o = fa::make_view(ob.data(), dtype(), Layout::kBSH, 1, H, 1, D);
  fa::cli::QuantizedCache cache;
  ASSERT_TRUE(fa::cli::quantize_cache(fa::make_view(k.data(), DType::kF32, Layout::kBSH, 1, 1, Skv, D),
                                      fa::make_view(v.data(), DType::kF32, Layout::kBSH, 1, 1, Skv, D), Layout::kBSH,
                                      DType::kI8, &cache)
                  .ok());
  cache.bind(p, t);
  const fa::Status st = fa::cli::kForward(p, t);
  ASSERT_TRUE(st.ok()) << st.message();
  for (std::int64_t i = 0; i < H * D; ++i) {
    ASSERT_EQ(fa::detail::load_as_f32(ob.data(), dtype(), i), i % 2 ? 3.0f : -3.0f) << "element " << i;
  }
}

// An FP8 cache read with 16-bit Q on the row path, whose products are bf16
// pair dot products where the CPU has VDPBF16PS and VBMI (K and V widened
// through byte tables 64 dims at a time, the last masked): each format,
// head_dims 8 to 256, whole and part 64-dim steps, 1 to 8 query rows (the
// planner keeps up to 8 on this row path), GQA groups of 1 to 24 rows a K/V
// head (every register block),
// odd key counts (a key pair's missing partner), paged caches, splits,
// BSH and BNSD; then large logits, where Q's products must be exact (fp16
// Q is split into two bf16s: rounded to one, a score of a few hundred
// moves by about one, and with it its probability by a factor of e).
// fp16 calls are held to a fifth of fp16's bound (the products exact).
TEST_P(EdgeCases, Fp8CacheOnTheRowPath) {
  if (kFa1) GTEST_SKIP() << "FA1 has no quantized cache";
  if (dtype() == DType::kF32) GTEST_SKIP() << "a quantized cache is read with fp16 or bf16 Q";
  for (const DType kv : {DType::kFP8E4M3, DType::kFP8E5M2}) {
    for (const CacheShape& s :
         {CacheShape{1, 8, 8, 128, 77, 1, 0, Layout::kBNSD}, CacheShape{1, 32, 8, 96, 333, 3, 0, Layout::kBSH},
          CacheShape{2, 8, 4, 128, 129, 2, 32, Layout::kBSH}, CacheShape{4, 8, 2, 64, 301, 1, 0, Layout::kBSND},
          CacheShape{1, 16, 2, 256, 200, 1, 16, Layout::kBNSD}, CacheShape{3, 6, 2, 80, 95, 2, 0, Layout::kBSH},
          CacheShape{1, 4, 1, 136, 257, 1, 0, Layout::kBNSD, 12.0}, CacheShape{2, 4, 4, 40, 99, 1, 0, Layout::kBSH, 12.0},
          CacheShape{1, 8, 8, 8, 50, 1, 0, Layout::kBNSD}, CacheShape{8, 8, 8, 72, 150, 1, 0, Layout::kBSH},
          CacheShape{6, 8, 2, 128, 120, 2, 0, Layout::kBNSD}}) {
      const CaseSpec c = cache_case(s, dtype(), kv, isa(), 950 + s.head_dim + s.seq_kv, /*sinks=*/s.seq_kv == 129);
      const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
      ASSERT_TRUE(r.status.ok()) << r.status.message();
      EXPECT_EQ(r.nonfinite, 0) << fa::cli::describe(c);
      // fp16: the products exact on every path (Q and P split in two bf16s
      // on the pair products), so O's error is about its own rounding
      // (2.1e-4 here; P rounded to one bf16 gave 1.3e-3).
      const double bound = dtype() == DType::kF16 ? 4e-4 : fa::cli::rel_l2_bound(dtype());
      EXPECT_LE(r.rel_l2_error, bound) << fa::cli::describe(c);
      EXPECT_LE(r.lse_max_error, fa::cli::lse_bound(dtype())) << fa::cli::describe(c);
    }
  }
}

// Inputs stored in a dtype, and a call on them: for tests that compare two
// calls on the same data bit for bit.
struct StoredCall {
  fa::cli::HostBuffer q, k, v, o;
  std::vector<float> lse;
  fa::AttentionTensors t;

  StoredCall(const fa::AttentionParams& p, DType dtype, Layout layout, std::uint64_t seed) {
    const std::int64_t D = p.head_dim, nq = p.batch * p.seq_q * p.num_heads * D, nkv = p.batch * p.seq_kv * p.kv_heads() * D;
    q = stored(normal(static_cast<std::size_t>(nq), seed, 1), dtype);
    k = stored(normal(static_cast<std::size_t>(nkv), seed + 1, 1), dtype);
    v = stored(normal(static_cast<std::size_t>(nkv), seed + 2, 1), dtype);
    o = fa::cli::HostBuffer(q.bytes());
    lse.assign(static_cast<std::size_t>(p.batch * p.num_heads * p.seq_q), 0.0f);
    t.q = fa::make_view(q.data(), dtype, layout, p.batch, p.num_heads, p.seq_q, D);
    t.k = fa::make_view(k.data(), dtype, layout, p.batch, p.kv_heads(), p.seq_kv, D);
    t.v = fa::make_view(v.data(), dtype, layout, p.batch, p.kv_heads(), p.seq_kv, D);
    t.o = fa::make_view(o.data(), dtype, Layout::kBSH, p.batch, p.num_heads, p.seq_q, D);
    t.lse = lse.data();
  }
  static fa::cli::HostBuffer stored(const std::vector<float>& x, DType dtype) {
    fa::cli::HostBuffer buf(x.size() * fa::dtype_size(dtype));
    for (std::size_t i = 0; i < x.size(); ++i) fa::detail::store_from_f32(buf.data(), dtype, i, x[i]);
    return buf;
  }
};

// The same inputs as `contiguous`, K/V moved into the pool of `cache`'s
// blocks (call with the params `cache` binds).
struct PooledCall {
  StoredCall call;
  fa::cli::HostBuffer kpool, vpool;

  PooledCall(const fa::AttentionParams& p, DType dtype, Layout layout, std::uint64_t seed, const fa::cli::PagedCache& cache,
             const StoredCall& contiguous)
      : call(p, dtype, layout, seed),
        kpool(fa::cli::scatter_to_pool(cache, contiguous.t.k, layout, p.seqlens_kv)),
        vpool(fa::cli::scatter_to_pool(cache, contiguous.t.v, layout, p.seqlens_kv)) {
    call.t.k = fa::make_view(kpool.data(), dtype, layout, 1, p.kv_heads(), cache.pool_tokens(), p.head_dim);
    call.t.v = fa::make_view(vpool.data(), dtype, layout, 1, p.kv_heads(), cache.pool_tokens(), p.head_dim);
  }
};

// Two calls' outputs and LSE equal bit for bit.
void expect_same_bits(const StoredCall& a, const StoredCall& b, const std::string& where) {
  EXPECT_EQ(0, std::memcmp(a.o.data(), b.o.data(), a.o.bytes())) << where;
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float))) << where;
}

// A paged KV cache gives the bits of the same keys stored contiguously:
// decoding, short and long queries, two block sizes (the K/V tile one block,
// and a quarter of one), blocks in random orders, head-interleaved and
// head-major pools, with and without per-sequence key counts; LSE too.  FA1
// refuses it.
TEST_P(EdgeCases, PagedCacheEqualsContiguousBitForBit) {
  std::uint64_t seed = 2024;
  const std::int32_t lengths[2] = {300, 113};
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    for (std::int64_t seq_q : {1, 3, 70}) {
      for (int block : {16, 64}) {
        for (bool own_lengths : {false, true}) {
          fa::AttentionParams p;
          p.batch = 2;
          p.seq_q = seq_q;
          p.seq_kv = 300;
          p.num_heads = 8;
          p.num_kv_heads = 2;
          p.head_dim = 32;
          p.causal = true;
          p.tile_q = 32;
          p.tile_kv = 16;  // the same plan for both calls (a paged call's tiles must fit a block)
          p.isa = isa();
          if (own_lengths) p.seqlens_kv = lengths;
          StoredCall contiguous(p, dtype(), layout, 31);
          // The pool: the blocks in a random order, three spare ones left zero.
          const fa::cli::PagedCache cache = fa::cli::make_paged_cache(p.batch, p.seq_kv, block, ++seed, 3);
          fa::AttentionParams paged = p;
          cache.bind(paged);
          PooledCall pooled(p, dtype(), layout, 31, cache, contiguous);
          if (kFa1) {
            EXPECT_EQ(fa::cli::kForward(paged, pooled.call.t).code(), fa::StatusCode::kUnsupported);
            return;
          }
          ASSERT_TRUE(fa::cli::kForward(p, contiguous.t).ok());
          const fa::Status s = fa::cli::kForward(paged, pooled.call.t);
          ASSERT_TRUE(s.ok()) << s.message();
          const std::string where = std::string(fa::layout_name(layout)) + " seq_q " + std::to_string(seq_q) +
                                    " block " + std::to_string(block) + (own_lengths ? " seqlens_kv" : "");
          expect_same_bits(contiguous, pooled.call, where);
        }
      }
    }
  }
}

// The tile unit's packed tiles that read K/V as rows, and its tile path of
// longer queries, take 32 keys over two blocks of 16 of a paged cache
// (vLLM's default block size; a 16-key tile would leave the pair path): the
// bits of the same 32-key tiles over the keys stored contiguously, for GQA
// decoding and speculative rows in bf16 (read in place) and speculative
// rows in fp16 (12 and 32 rows a K/V head, widened into pieces; fewer take
// the row path), 100 queries (each tile packed from its two blocks: bf16's
// tile path, fp16's packed group of 400 rows), both
// layouts, a last tile inside a block and one ending at a block's end,
// per-sequence key counts, splits; LSE too.
TEST_P(EdgeCases, PagedTilesOverTwoBlocksEqualContiguousBitForBit) {
  if (kFa1) GTEST_SKIP() << "FA1 refuses a paged cache";
  if (isa() != fa::Isa::kAmx || dtype() == DType::kF32) GTEST_SKIP() << "the tile unit's rows tiles only";
  std::uint64_t seed = 77;
  const std::int32_t lengths[2] = {304, 141};
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    const std::vector<std::int64_t> seq_qs =
        dtype() == DType::kF16 ? std::vector<std::int64_t>{3, 8, 100} : std::vector<std::int64_t>{1, 3, 100};
    for (std::int64_t seq_q : seq_qs) {
      for (std::int64_t head_dim : {64, 128}) {
        for (bool own_lengths : {false, true}) {
          fa::AttentionParams p;
          p.batch = 2;
          p.seq_q = seq_q;
          p.seq_kv = 317;
          p.num_heads = 16;
          p.num_kv_heads = 4;
          p.head_dim = head_dim;
          p.causal = seq_q > 1;
          p.tile_kv = 32;  // the same tiles for both calls
          p.num_splits = own_lengths ? 1 : 3;
          p.isa = isa();
          p.kv_heads_side_by_side = layout != Layout::kBNSD;
          if (own_lengths) p.seqlens_kv = lengths;
          StoredCall contiguous(p, dtype(), layout, 61);
          const fa::cli::PagedCache cache = fa::cli::make_paged_cache(p.batch, p.seq_kv, 16, ++seed, 3);
          fa::AttentionParams paged = p;
          cache.bind(paged);
          const std::string where = std::string(fa::layout_name(layout)) + " seq_q " + std::to_string(seq_q) +
                                    " head_dim " + std::to_string(head_dim) + (own_lengths ? " seqlens_kv" : "");
          fa::TilePlan plan;
          ASSERT_TRUE(fa::plan(fa::cli::kVersion, paged, dtype(), &plan).ok()) << where;
          if (dtype() == DType::kBF16) {
            EXPECT_EQ(plan.pack_tile, seq_q < 100) << where << ": a packed tile, or the tile path";
          }
          EXPECT_EQ(plan.tile_kv, 32) << where << ": 32 keys over two blocks of 16";
          PooledCall pooled(p, dtype(), layout, 61, cache, contiguous);
          ASSERT_TRUE(fa::cli::kForward(p, contiguous.t).ok()) << where;
          const fa::Status s = fa::cli::kForward(paged, pooled.call.t);
          ASSERT_TRUE(s.ok()) << s.message();
          expect_same_bits(contiguous, pooled.call, where);
        }
      }
    }
  }
}

// Per-sequence key counts (seqlens_kv) give each sequence the bits of a call
// of its own over its keys: decoding, speculative rows and a tile-path
// chunk, GQA, causal, both layouts, unsplit (a split call's chunks would
// differ from the single call's); an empty sequence writes zeros and an LSE
// of -inf.  FA1 refuses it.
TEST_P(EdgeCases, SeqlensKvEqualsOneCallPerSequence) {
  const std::int32_t lengths[4] = {45, 0, 300, 129};
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    for (std::int64_t seq_q : {1, 5, 40}) {
      fa::AttentionParams p;
      p.batch = 4;
      p.seq_q = seq_q;
      p.seq_kv = 300;
      p.num_heads = 6;
      p.num_kv_heads = 2;
      p.head_dim = 48;
      p.causal = true;
      p.tile_q = 16;
      p.tile_kv = 32;
      p.num_splits = 1;
      p.isa = isa();
      p.seqlens_kv = lengths;
      StoredCall batched(p, dtype(), layout, 41);
      if (kFa1) {
        EXPECT_EQ(fa::cli::kForward(p, batched.t).code(), fa::StatusCode::kUnsupported);
        return;
      }
      const fa::Status s = fa::cli::kForward(p, batched.t);
      ASSERT_TRUE(s.ok()) << s.message();
      const std::size_t es = fa::dtype_size(dtype()), rows = static_cast<std::size_t>(seq_q * p.num_heads);
      const std::size_t o_bytes = rows * static_cast<std::size_t>(p.head_dim) * es;
      for (std::int64_t b = 0; b < p.batch; ++b) {
        const std::string where = std::string(fa::layout_name(layout)) + " seq_q " + std::to_string(seq_q) +
                                  " sequence " + std::to_string(b);
        const char* o_b = static_cast<const char*>(batched.o.data()) + b * o_bytes;
        const float* lse_b = batched.lse.data() + b * rows;
        if (lengths[b] == 0) {
          for (std::size_t i = 0; i < o_bytes; ++i) ASSERT_EQ(o_b[i], 0) << where;
          for (std::size_t i = 0; i < rows; ++i) EXPECT_EQ(lse_b[i], -std::numeric_limits<float>::infinity()) << where;
          continue;
        }
        // The same sequence alone: views of batch entry b, cut to its keys.
        fa::AttentionParams one = p;
        one.batch = 1;
        one.seq_kv = lengths[b];
        one.seqlens_kv = nullptr;
        fa::AttentionTensors t = batched.t;
        for (fa::TensorView* view : {&t.q, &t.k, &t.v}) {
          view->data = static_cast<char*>(view->data) + b * view->strides[0] * static_cast<std::int64_t>(es);
          view->shape[0] = 1;
        }
        t.k.shape[2] = t.v.shape[2] = lengths[b];
        fa::cli::HostBuffer o(o_bytes);
        std::vector<float> lse(rows);
        t.o = fa::make_view(o.data(), dtype(), Layout::kBSH, 1, p.num_heads, seq_q, p.head_dim);
        t.lse = lse.data();
        const fa::Status alone = fa::cli::kForward(one, t);
        ASSERT_TRUE(alone.ok()) << alone.message();
        EXPECT_EQ(0, std::memcmp(o.data(), o_b, o_bytes)) << where;
        EXPECT_EQ(0, std::memcmp(lse.data(), lse_b, rows * sizeof(float))) << where;
      }
    }
  }
}

// Split or not, every mask mode gives the same output within the dtype's
// rounding (the combine is exact up to fp32 rounding), and the same LSE.
TEST_P(EdgeCases, SplitMatchesUnsplitForEveryMaskMode) {
  for (MaskMode mode : {MaskMode::kNone, MaskMode::kCausal, MaskMode::kExplicit, MaskMode::kCausalAndExplicit}) {
    CaseSpec c;
    c.dtype = dtype();
    c.mask = mode;
    c.seed = 77 + static_cast<int>(mode);
    c.params.batch = 2;
    c.params.seq_q = 37;
    c.params.seq_kv = 411;
    c.params.num_heads = 4;
    c.params.num_kv_heads = 2;
    c.params.head_dim = 48;
    c.params.tile_q = 16;
    c.params.tile_kv = 32;
    c.params.threads = 3;
    c.params.isa = isa();
    if (kFa1) c.params.tile_q = c.params.tile_kv = 0;
    for (int splits : {1, 2, 5, 13}) {
      c.params.num_splits = splits;
      const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
      if (kFa1 && splits > 1) {  // FA1 has no split-KV: refused, not ignored
        EXPECT_EQ(r.status.code(), fa::StatusCode::kUnsupported) << r.status.message();
        continue;
      }
      ASSERT_TRUE(r.status.ok()) << r.status.message();
      EXPECT_EQ(r.nonfinite, 0);
      EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(dtype())) << fa::cli::describe(c);
      EXPECT_LE(r.lse_max_error, fa::cli::lse_bound(c.dtype)) << fa::cli::describe(c);
    }
  }
}

TEST_P(EdgeCases, DropoutIsIndependentOfThreadsTilesAndSplits) {
  CaseSpec c;
  c.dtype = dtype();
  c.mask = MaskMode::kCausal;
  c.seed = 5;
  c.params.batch = 2;
  c.params.seq_q = 70;
  c.params.seq_kv = 90;
  c.params.num_heads = 4;
  c.params.num_kv_heads = 2;  // GQA + causal + dropout
  c.params.head_dim = 32;
  c.params.keep_prob = 0.8f;
  c.params.dropout_seed = 1234;
  c.params.isa = isa();
  // Each run is checked against the reference, which draws the same mask:
  // agreement under different threads, tiles and splits means the dropped
  // elements did not move.
  for (auto [threads, tq, tkv, splits] : {std::tuple{1, 16, 16, 1}, {3, 64, 32, 1}, {2, 32, 16, 3}}) {
    c.params.threads = threads;
    c.params.tile_q = kFa1 ? 0 : tq;  // FA1: its own tiles, no split-KV
    c.params.tile_kv = kFa1 ? 0 : tkv;
    c.params.num_splits = kFa1 ? 1 : splits;
    const fa::cli::CaseResult r = fa::cli::run_case(c, fa::cli::kForward);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_LE(r.rel_l2_error, fa::cli::rel_l2_bound(dtype())) << fa::cli::describe(c);
  }
}

TEST(Dropout, KeepsTheRequestedFraction) {
  fa::detail::Dropout d;
  d.active = true;
  d.seed = 99;
  d.keep_threshold = static_cast<std::uint32_t>(0.7 * 4294967296.0);
  d.scale = 1.0f / 0.7f;
  std::int64_t kept = 0, n = 0;
  for (std::uint64_t i = 0; i < 300; ++i) {
    for (std::uint64_t j = 0; j < 300; ++j, ++n) kept += fa::detail::dropout_factor(d, 3, i, j) != 0.0f;
  }
  EXPECT_NEAR(double(kept) / double(n), 0.7, 0.01);
}

TEST_P(EdgeCases, SplitPlanIsWholeTilesAndCoversTheKeys) {
  fa::AttentionParams p;
  p.seq_q = 1;
  p.seq_kv = 32768;
  p.num_heads = 1;
  p.head_dim = 128;
  p.tile_kv = 64;
  p.threads = 4;
  p.isa = isa();
  p.num_splits = fa::kSplitsAuto;
  fa::TilePlan plan;
  if (kFa1) p.tile_kv = 0;
  ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok());
  if (kFa1) {
    EXPECT_EQ(plan.num_splits, 1) << "FA1 never splits";
    return;
  }
  EXPECT_GT(plan.num_splits, 1) << "one query row, one head: auto must split";
  EXPECT_EQ(plan.split_keys % plan.tile_kv, 0);
  EXPECT_GE(plan.split_keys * plan.num_splits, p.seq_kv);
  EXPECT_LT(plan.split_keys * (plan.num_splits - 1), p.seq_kv);
  // Decoding packs every head of the batch into one item (each token row's
  // K/V read whole) and splits for the threads...
  p.num_heads = 64;
  ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok());
  EXPECT_EQ(plan.pack_gqa, 64);
  EXPECT_GT(plan.num_splits, 1);
  // ...but without split-KV packs only as many heads as leave each thread an item.
  p.num_splits = 1;
  ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok());
  EXPECT_EQ(plan.pack_gqa, 16);
  EXPECT_EQ(plan.num_splits, 1);
  // Longer queries: one item per head, enough for every thread: auto does not
  // split (128: on the amx path up to 64 queries of a head read K/V as rows
  // in a packed tile, their K/V heads walked together).
  p.seq_q = 128;
  p.num_splits = fa::kSplitsAuto;
  ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, dtype(), &plan).ok());
  EXPECT_EQ(plan.pack_gqa, 1);
  EXPECT_EQ(plan.num_splits, 1);
}

INSTANTIATE_TEST_SUITE_P(AllPaths, EdgeCases, ::testing::Combine(kPaths, kDtypes), [](const auto& info) {
  return std::string(fa::isa_name(std::get<0>(info.param))) + "_" + std::string(fa::dtype_name(std::get<1>(info.param)));
});

}  // namespace
