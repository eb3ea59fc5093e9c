// Bad arguments come back as a Status with a message; nothing aborts.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/dtype_convert.h"
#include "driver/version_entry.h"
#include "flash_attention/flash_attention.h"

namespace {

class ApiValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    p.batch = 1;
    p.seq_q = 16;
    p.seq_kv = 16;
    p.num_heads = 2;
    p.head_dim = 16;
    rebuild();
  }
  void rebuild() {
    const std::int64_t hkv = p.kv_heads() > 0 ? p.kv_heads() : 1;
    q.assign(p.batch * p.num_heads * p.seq_q * p.head_dim, 0.5f);
    kv.assign(p.batch * hkv * p.seq_kv * p.head_dim, 0.25f);
    o.assign(q.size(), 0.0f);
    t.q = fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
    t.k = fa::make_view(kv.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, hkv, p.seq_kv, p.head_dim);
    t.v = t.k;
    t.o = fa::make_view(o.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
  }
  // Views of batch 1 over the same 16 tokens, for variable-length calls.
  void rebuild_packed() {
    const std::int64_t hkv = p.kv_heads();
    q.assign(p.num_heads * p.seq_q * p.head_dim, 0.5f);
    kv.assign(hkv * p.seq_kv * p.head_dim, 0.25f);
    o.assign(q.size(), 0.0f);
    t.q = fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kTND, 1, p.num_heads, p.seq_q, p.head_dim);
    t.k = fa::make_view(kv.data(), fa::DType::kF32, fa::Layout::kTND, 1, hkv, p.seq_kv, p.head_dim);
    t.v = t.k;
    t.o = fa::make_view(o.data(), fa::DType::kF32, fa::Layout::kTND, 1, p.num_heads, p.seq_q, p.head_dim);
  }
  void expect_invalid(const std::string& fragment) {
    const fa::Status s = fa::cli::kForward(p, t);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), fa::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
  }
  fa::AttentionParams p;
  fa::AttentionTensors t;
  std::vector<float> q, kv, o;
};

TEST_F(ApiValidation, AcceptsTheBaseline) { EXPECT_TRUE(fa::cli::kForward(p, t).ok()); }

TEST_F(ApiValidation, HeadDimNotMultipleOfEight) {
  p.head_dim = 12;
  rebuild();
  expect_invalid("head_dim must be a multiple of 8");
}

TEST_F(ApiValidation, HeadDimTooLarge) {
  p.head_dim = 264;
  rebuild();
  expect_invalid("head_dim");
}

TEST_F(ApiValidation, HeadsNotDivisibleByKvHeads) {
  p.num_heads = 3;
  p.num_kv_heads = 2;
  rebuild();
  expect_invalid("divisible by num_kv_heads");
}

TEST_F(ApiValidation, NonPositiveSizes) {
  p.seq_q = 0;
  expect_invalid("seq_q must be a positive integer");
  p.seq_q = 16;
  p.batch = -1;
  expect_invalid("batch must be a positive integer");
}

// Found by fuzzing (tests/fuzz/fuzz_api.cpp): sizes whose products overflow
// 64 bits wrapped inside make_view and the planner (undefined behaviour);
// they are now refused, with the view's overflowing stride marked -1.
TEST_F(ApiValidation, SizesWhoseProductsOverflowAreRefused) {
  const std::int64_t huge = std::int64_t{1} << 40;
  const fa::TensorView v = fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kBSH, huge, huge, huge, 64);
  EXPECT_EQ(v.strides[0], -1);
  EXPECT_EQ(fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kBNSD, 2, huge, huge, 64).strides[0], -1);
  p.seq_q = p.seq_kv = huge;
  p.num_heads = p.num_kv_heads = 1 << 20;
  expect_invalid("the shape is too large");
  fa::TilePlan plan;
  const fa::Status s = fa::plan(fa::Version::kFA2, p, fa::DType::kF32, &plan);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the shape is too large"), std::string::npos) << s.message();
}

TEST_F(ApiValidation, TileNotPowerOfTwo) {
  p.tile_q = 100;
  expect_invalid("tile_q must be a power of two");
  p.tile_q = 0;
  p.tile_kv = 1024;
  expect_invalid("tile_kv must be a power of two");
}

TEST_F(ApiValidation, BadScaleAndThreads) {
  p.scale = -1.0f;
  expect_invalid("scale");
  p.scale.reset();
  p.threads = -3;
  expect_invalid("threads");
}

TEST_F(ApiValidation, NullPointerAndShapeMismatch) {
  t.k.data = nullptr;
  expect_invalid("K: data pointer is null");
  rebuild();
  t.v.shape[2] = 15;
  expect_invalid("V: shape");
}

TEST_F(ApiValidation, MixedDtypesAndStrides) {
  t.v.dtype = fa::DType::kF16;
  expect_invalid("V: dtype fp16 differs");
  rebuild();
  t.q.strides[3] = 2;
  expect_invalid("head_dim stride must be 1");
  rebuild();
  t.q.strides[2] = -5;
  expect_invalid("strides must be non-negative");
}

TEST_F(ApiValidation, BadWindowsSinksAndModes) {
  p.sparse_mode = fa::SparseMode::kBand;
  p.pre_tokens = -1;
  expect_invalid("pre_tokens and next_tokens must be >= 0");
  p.pre_tokens = 4;
  p.causal = true;
  expect_invalid("causal and sparse_mode 4 disagree");
  p.causal = false;
  const float bad_sinks[2] = {0.5f, std::numeric_limits<float>::quiet_NaN()};
  p.sinks = bad_sinks;
  expect_invalid("sinks[1] must be finite");
  p.sinks = nullptr;
  p.sparse_mode.reset();
  p.softcap = -2.0f;
  expect_invalid("softcap must be 0 (off) or a positive finite number");
  p.softcap = 0.0f;
  std::vector<float> bias(3 * 16 * 16, 0.0f);
  p.bias = bias.data();
  p.bias_heads = 3;  // the call has 2 heads
  expect_invalid("bias must have 1 or num_heads (2) heads");
  p.bias = nullptr;
  for (float keep : {0.0f, 1.5f, -0.2f}) {
    p.keep_prob = keep;
    expect_invalid("keep_prob must be in (0, 1]");
  }
}

TEST_F(ApiValidation, BadVariableLengths) {
  // Two sequences of 10 and 6 queries / keys packed into the 16 tokens.
  p.batch = 2;
  rebuild_packed();
  std::int32_t cu_q[] = {0, 10, 16}, cu_kv[] = {0, 6, 16};
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_kv = cu_kv;
  EXPECT_TRUE(fa::cli::kForward(p, t).ok());
  std::int32_t decreasing[] = {0, 12, 10};
  p.cu_seqlens_q = decreasing;
  expect_invalid("cu_seqlens_q must not decrease");
  std::int32_t short_total[] = {0, 6, 15};
  p.cu_seqlens_q = cu_q;
  p.cu_seqlens_kv = short_total;
  expect_invalid("cu_seqlens_kv[batch] = 15 does not match the tensors' 16 tokens");
  p.cu_seqlens_kv = nullptr;
  expect_invalid("must be given together");
}

// A call's workspace is kept for the next one and can be freed; a call after
// the release allocates afresh and gives the same result.
TEST_F(ApiValidation, WorkspaceIsKeptForReuseAndReleased) {
  ASSERT_TRUE(fa::cli::kForward(p, t).ok());
  const std::vector<float> first = o;
  EXPECT_GE(fa::cached_workspace_bytes(), fa::cli::version_workspace_bytes(p, fa::DType::kF32, 1));
  fa::release_cached_workspace();
  EXPECT_EQ(fa::cached_workspace_bytes(), 0u);
  o.assign(o.size(), 0.0f);
  ASSERT_TRUE(fa::cli::kForward(p, t).ok());
  EXPECT_EQ(o, first);
  EXPECT_GT(fa::cached_workspace_bytes(), 0u);
}

// Tensor memory: 64-byte aligned, and 2 MiB aligned when it asks for huge
// pages at 2 MiB or more (the kernel may still refuse them: advice only);
// the kernel's policy reads as one of sysfs's three words, or empty.
TEST(TensorMemory, AlignedAndOnHugePagesWhenAsked) {
  const std::size_t mib = std::size_t{1} << 20;
  for (const auto& [bytes, huge, align] : {std::tuple{std::size_t{100}, true, std::size_t{64}},
                                           std::tuple{3 * mib, false, std::size_t{64}},
                                           std::tuple{3 * mib, true, 2 * mib}}) {
    void* p = fa::allocate_tensor_memory(bytes, huge);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << bytes << (huge ? " huge" : "");
    std::memset(p, 1, bytes);  // all of it is ours
    std::free(p);
  }
  const std::string thp = fa::transparent_huge_pages();
  EXPECT_TRUE(thp.empty() || thp == "always" || thp == "madvise" || thp == "never") << thp;
}

TEST(ApiNames, ParseAndPrintRoundTrip) {
  for (fa::DType d : {fa::DType::kF32, fa::DType::kF16, fa::DType::kBF16, fa::DType::kFP8E4M3, fa::DType::kFP8E5M2, fa::DType::kI8}) {
    EXPECT_EQ(fa::parse_dtype(fa::dtype_name(d)), d);
  }
  for (fa::Layout l : {fa::Layout::kBSH, fa::Layout::kBSND, fa::Layout::kBNSD, fa::Layout::kTND}) {
    EXPECT_EQ(fa::parse_layout(fa::layout_name(l)), l);
  }
  EXPECT_FALSE(fa::parse_dtype("fp8").has_value());
  EXPECT_FALSE(fa::parse_layout("SBH").has_value());
}

}  // namespace

// A paged KV cache: K and V are a pool of 4 blocks of 16 tokens (views of
// batch 1 over 64 tokens); each sequence's 16 keys live in one block.
class PagedValidation : public ApiValidation {
 protected:
  void SetUp() override {
    p.batch = 2;
    p.seq_q = 1;
    p.seq_kv = 16;
    p.num_heads = 2;
    p.head_dim = 16;
    rebuild();
    pool.assign(4 * 16 * p.num_heads * p.head_dim, 0.25f);
    t.k = fa::make_view(pool.data(), fa::DType::kF32, fa::Layout::kBSH, 1, p.num_heads, 64, p.head_dim);
    t.v = t.k;
    p.block_table = table;
    p.max_blocks_per_seq = 1;
    p.block_size = 16;
    p.kv_num_blocks = 4;
  }
  std::vector<float> pool;
  std::int32_t table[2] = {3, 1};
};

TEST_F(PagedValidation, AcceptsTheBaseline) { EXPECT_TRUE(fa::cli::kForward(p, t).ok()); }

TEST_F(PagedValidation, BlockSizeNotAPowerOfTwo) {
  p.block_size = 24;
  expect_invalid("block_size must be a power of two from 16 to 512 (got 24)");
}

TEST_F(PagedValidation, IndexOutsideThePool) {
  table[1] = 4;
  expect_invalid("block_table[1][0] = 4 is outside the pool of 4 blocks");
  table[1] = -1;
  expect_invalid("block_table[1][0] = -1 is outside the pool");
}

TEST_F(PagedValidation, LengthBeyondTheBlocksGiven) {
  p.seq_kv = 17;  // two blocks per sequence, one given
  expect_invalid("seq_kv = 17 keys need 2 blocks of 16 per sequence, but max_blocks_per_seq is 1");
}

TEST_F(PagedValidation, PoolViewMustHoldEveryBlock) {
  p.kv_num_blocks = 5;  // the views hold 4 blocks
  expect_invalid("K: shape [1, 2, 64, 16] does not match expected [1, 2, 80, 16]");
}

TEST_F(PagedValidation, TileLargerThanABlock) {
  p.tile_kv = 32;
  expect_invalid("tile_kv 32 is larger than the paged cache's block_size 16");
}

TEST_F(PagedValidation, NotWithVariableLengths) {
  const std::int32_t cu[3] = {0, 1, 2};
  p.cu_seqlens_q = cu;
  p.cu_seqlens_kv = cu;
  expect_invalid("a paged KV cache (block_table) does not combine with cu_seqlens");
}

// Per-sequence key counts (seqlens_kv) of a contiguous cache of 16 keys,
// and of the paged one above.
class SeqlensKvValidation : public ApiValidation {
 protected:
  void SetUp() override {
    p.batch = 2;
    p.seq_q = 1;
    p.seq_kv = 16;
    p.num_heads = 2;
    p.head_dim = 16;
    rebuild();
    p.seqlens_kv = lengths;
  }
  std::int32_t lengths[2] = {16, 3};
};

TEST_F(SeqlensKvValidation, AcceptsTheBaseline) { EXPECT_TRUE(fa::cli::kForward(p, t).ok()); }

TEST_F(SeqlensKvValidation, CountOutsideTheCache) {
  lengths[1] = 17;
  expect_invalid("seqlens_kv[1] = 17 is outside the cache (expected 0 ... seq_kv = 16)");
  lengths[1] = -1;
  expect_invalid("seqlens_kv[1] = -1 is outside the cache");
}

TEST_F(SeqlensKvValidation, NotWithVariableLengthsMaskOrBias) {
  const std::int32_t cu[3] = {0, 1, 2};
  p.cu_seqlens_q = cu;
  p.cu_seqlens_kv = cu;
  expect_invalid("seqlens_kv does not combine with cu_seqlens");
  p.cu_seqlens_q = p.cu_seqlens_kv = nullptr;
  const std::vector<std::int8_t> mask(16, 1);
  p.mask = mask.data();
  expect_invalid("per-sequence key counts (seqlens_kv) do not combine with an explicit mask or a bias tensor");
}

TEST_F(SeqlensKvValidation, FlashAttention1RefusesIt) {
  const fa::Status s = fa::version_supports(fa::Version::kFA1, p, fa::DType::kF32);
  EXPECT_EQ(s.code(), fa::StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("per-sequence key counts"), std::string::npos) << s.message();
}

// A paged cache with per-sequence counts reads only each sequence's blocks:
// the table's entries past them may hold anything (here -1), and the call
// runs; an entry a sequence does read is still checked.
TEST_F(PagedValidation, EntriesPastASequencesBlocksAreNotRead) {
  std::int32_t lengths[2] = {16, 0};
  std::int32_t wide_table[4] = {3, -1, -1, -1};
  p.block_table = wide_table;
  p.max_blocks_per_seq = 2;
  p.seqlens_kv = lengths;
  p.seq_kv = 32;
  if (fa::cli::kVersion == fa::Version::kFA1) {
    EXPECT_EQ(fa::cli::kForward(p, t).code(), fa::StatusCode::kUnsupported);
    return;
  }
  const fa::Status s = fa::cli::kForward(p, t);
  EXPECT_TRUE(s.ok()) << s.message();
  lengths[1] = 1;
  expect_invalid("block_table[1][0] = -1 is outside the pool of 4 blocks");
}

TEST_F(PagedValidation, FlashAttention1RefusesIt) {
  const fa::Status s = fa::version_supports(fa::Version::kFA1, p, fa::DType::kF32);
  EXPECT_EQ(s.code(), fa::StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("a paged KV cache"), std::string::npos) << s.message();
}

// A quantized K/V cache: bf16 Q and O over an int8 K and V with their
// per-(token, head) scales, or FP8 K and V with per-head factors.
class QuantizedKvValidation : public ApiValidation {
 protected:
  void SetUp() override {
    ApiValidation::SetUp();
    q16.assign(q.size(), 0x3f00);  // bf16 0.5
    o16.assign(q.size(), 0);
    k8.assign(kv.size(), 3);
    scales.assign(static_cast<std::size_t>(p.batch * p.kv_heads() * p.seq_kv), 0.01f);
    t.q = fa::make_view(q16.data(), fa::DType::kBF16, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
    t.o = fa::make_view(o16.data(), fa::DType::kBF16, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
    t.k = fa::make_view(k8.data(), fa::DType::kI8, fa::Layout::kBSH, p.batch, p.kv_heads(), p.seq_kv, p.head_dim);
    t.v = t.k;
    t.k_scale = fa::make_view(scales.data(), fa::DType::kF32, fa::Layout::kBSH, p.batch, p.kv_heads(), p.seq_kv, 1);
    t.v_scale = t.k_scale;
  }
  void expect_fa1_refuses() {
    const fa::Status s = fa::cli::kForward(p, t);
    EXPECT_EQ(s.code(), fa::StatusCode::kUnsupported) << s.message();
    EXPECT_NE(s.message().find("FlashAttention-1 does not offer a quantized K/V cache"), std::string::npos) << s.message();
  }
  std::vector<std::uint16_t> q16, o16;
  std::vector<std::int8_t> k8;
  std::vector<float> scales;
};

TEST_F(QuantizedKvValidation, AcceptsTheBaseline) {
  if (fa::cli::kVersion == fa::Version::kFA1) return expect_fa1_refuses();
  const fa::Status s = fa::cli::kForward(p, t);
  EXPECT_TRUE(s.ok()) << s.message();
  // Every key is 3 * 0.01 in every dimension, so every output element is 0.03 (bf16).
  EXPECT_NEAR(fa::detail::bf16_to_f32(o16[5]), 0.03, 0.03 * 4e-3);
}

TEST_F(QuantizedKvValidation, ScalesMustBeThereAndFit) {
  t.k_scale = fa::TensorView{};
  expect_invalid("k_scale: an int8 K/V cache needs its scales (fp32 [batch, kv_heads, seq_kv, 1])");
  SetUp();
  t.v_scale.dtype = fa::DType::kBF16;
  expect_invalid("v_scale: dtype bf16 (expected fp32)");
  SetUp();
  t.k_scale.shape[2] = 8;
  expect_invalid("k_scale: shape [1, 2, 8, 1] does not match expected [1, 2, 16, 1]");
}

TEST_F(QuantizedKvValidation, DtypesThatDoNotGoTogether) {
  t.v.dtype = fa::DType::kFP8E4M3;
  expect_invalid("V: dtype fp8_e4m3 differs from K's dtype int8");
  SetUp();
  t.q.dtype = t.o.dtype = fa::DType::kF32;  // (the bytes do not matter: refused first)
  expect_invalid("K: dtype int8 differs from Q's dtype fp32 (a quantized K/V cache is int8, fp8_e4m3 or fp8_e5m2 "
                 "read with fp16 or bf16 Q)");
  SetUp();
  t.q.dtype = fa::DType::kI8;
  expect_invalid("Q: int8 is a K/V cache dtype (with fp16 or bf16 Q), not an input dtype");
  SetUp();
  t.k.dtype = t.v.dtype = fa::DType::kBF16;
  expect_invalid("k_scale applies to int8 K/V caches only (K/V are bf16)");
}

TEST_F(QuantizedKvValidation, Fp8CacheTakesKvFactorsOnly) {
  t.k.dtype = t.v.dtype = fa::DType::kFP8E4M3;
  t.k_scale = t.v_scale = fa::TensorView{};
  const float factor[1] = {0.5f};
  p.descale_k = p.descale_v = factor;
  p.descale_k_count = p.descale_v_count = 1;
  if (fa::cli::kVersion == fa::Version::kFA1) return expect_fa1_refuses();
  EXPECT_TRUE(fa::cli::kForward(p, t).ok());
  p.descale_q = factor;
  p.descale_q_count = 1;
  expect_invalid("descale_q applies to FP8 tensors only (Q is bf16)");
  p.descale_q = nullptr;
  t.k.dtype = t.v.dtype = fa::DType::kBF16;
  expect_invalid("descale_k applies to FP8 tensors only (K/V are bf16)");
}
