// append_kv_cache: new tokens' K/V rows land in their slots of a contiguous
// cache or a paged pool, nothing else is written, and a decoding step built
// on it gives the same bits through either cache.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/dtype_convert.h"
#include "driver/host_tensor.h"
#include "driver/paged_cache.h"
#include "driver/version_entry.h"
#include "flash_attention/flash_attention.h"

namespace {

using fa::DType;
using fa::Layout;

constexpr std::int64_t kHeads = 2, kDim = 16;

fa::cli::HostBuffer random_rows(DType dtype, std::int64_t n, std::uint64_t seed) {
  fa::cli::HostBuffer b(static_cast<std::size_t>(n) * fa::dtype_size(dtype));
  fa::cli::fill_normal(b.data(), dtype, n, seed, 1.0);
  return b;
}

// Every cache row: the later new token that names its slot, else untouched.
TEST(AppendKvCache, WritesEachTokenToItsSlotOnly) {
  for (Layout layout : {Layout::kBSH, Layout::kBNSD}) {
    const DType dtype = DType::kBF16;
    const std::int64_t B = 3, S = 20, T = 5;
    const std::int64_t slots[T] = {0 * S + 7, 2 * S + 19, -1, 1 * S + 0, 0 * S + 7};
    fa::cli::HostBuffer k_new = random_rows(dtype, T * kHeads * kDim, 1), v_new = random_rows(dtype, T * kHeads * kDim, 2);
    fa::cli::HostBuffer k_cache = random_rows(dtype, B * S * kHeads * kDim, 3);
    fa::cli::HostBuffer v_cache = random_rows(dtype, B * S * kHeads * kDim, 4);
    fa::cli::HostBuffer k_before(k_cache.bytes()), v_before(v_cache.bytes());
    std::memcpy(k_before.data(), k_cache.data(), k_cache.bytes());
    std::memcpy(v_before.data(), v_cache.data(), v_cache.bytes());
    const fa::TensorView kn = fa::make_view(k_new.data(), dtype, layout, 1, kHeads, T, kDim);
    const fa::TensorView vn = fa::make_view(v_new.data(), dtype, layout, 1, kHeads, T, kDim);
    const fa::TensorView kc = fa::make_view(k_cache.data(), dtype, layout, B, kHeads, S, kDim);
    const fa::TensorView vc = fa::make_view(v_cache.data(), dtype, layout, B, kHeads, S, kDim);
    ASSERT_TRUE(fa::append_kv_cache(kn, vn, slots, kc, vc, 2).ok());
    const std::size_t es = fa::dtype_size(dtype), row = kDim * es;
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t s = 0; s < S; ++s) {
        std::int64_t from = -1;  // the last token naming this slot
        for (std::int64_t t = 0; t < T; ++t) from = slots[t] == b * S + s ? t : from;
        for (std::int64_t h = 0; h < kHeads; ++h) {
          for (auto [cache, before, fresh, fresh_view] : {std::tuple{&k_cache, &k_before, &k_new, kn},
                                                          std::tuple{&v_cache, &v_before, &v_new, vn}}) {
            const char* got = static_cast<const char*>(cache->data()) + kc.offset(b, h, s, 0) * es;
            const char* want = from >= 0 ? static_cast<const char*>(fresh->data()) + fresh_view.offset(0, h, from, 0) * es
                                         : static_cast<const char*>(before->data()) + kc.offset(b, h, s, 0) * es;
            EXPECT_EQ(0, std::memcmp(got, want, row))
                << fa::layout_name(layout) << " b " << b << " s " << s << " h " << h << " token " << from;
          }
        }
      }
    }
  }
}

// One decoding step: each sequence's new token appended at its position,
// then attention over its keys (seqlens_kv), through a contiguous cache and
// a paged pool (slots from the block table): the same bits.
TEST(AppendKvCache, DecodingStepThroughAPagedPoolEqualsContiguous) {
  const DType dtype = DType::kF16;
  const std::int64_t B = 2, S = 64, H = 4, block = 16;
  std::int32_t lengths[B] = {30, 47};  // before the new token
  fa::cli::HostBuffer k = random_rows(dtype, B * S * kHeads * kDim, 5), v = random_rows(dtype, B * S * kHeads * kDim, 6);
  const fa::TensorView kc = fa::make_view(k.data(), dtype, Layout::kBSH, B, kHeads, S, kDim);
  const fa::TensorView vc = fa::make_view(v.data(), dtype, Layout::kBSH, B, kHeads, S, kDim);
  const fa::cli::PagedCache paged = fa::cli::make_paged_cache(B, S, block, 9, 2);
  fa::cli::HostBuffer k_pool = fa::cli::scatter_to_pool(paged, kc, Layout::kBSH, lengths);
  fa::cli::HostBuffer v_pool = fa::cli::scatter_to_pool(paged, vc, Layout::kBSH, lengths);
  const fa::TensorView kp = fa::make_view(k_pool.data(), dtype, Layout::kBSH, 1, kHeads, paged.pool_tokens(), kDim);
  const fa::TensorView vp = fa::make_view(v_pool.data(), dtype, Layout::kBSH, 1, kHeads, paged.pool_tokens(), kDim);

  fa::cli::HostBuffer k_new = random_rows(dtype, B * kHeads * kDim, 7), v_new = random_rows(dtype, B * kHeads * kDim, 8);
  const fa::TensorView kn = fa::make_view(k_new.data(), dtype, Layout::kBSH, 1, kHeads, B, kDim);
  const fa::TensorView vn = fa::make_view(v_new.data(), dtype, Layout::kBSH, 1, kHeads, B, kDim);
  std::int64_t contiguous_slots[B], paged_slots[B];
  for (std::int64_t b = 0; b < B; ++b) {
    contiguous_slots[b] = b * S + lengths[b];
    paged_slots[b] = paged.pool_row(b, lengths[b]);
  }
  ASSERT_TRUE(fa::append_kv_cache(kn, vn, contiguous_slots, kc, vc).ok());
  ASSERT_TRUE(fa::append_kv_cache(kn, vn, paged_slots, kp, vp).ok());
  for (std::int32_t& n : lengths) ++n;

  fa::AttentionParams p;
  p.batch = B;
  p.seq_q = 1;
  p.seq_kv = S;
  p.num_heads = H;
  p.num_kv_heads = kHeads;
  p.head_dim = kDim;
  p.tile_kv = 16;
  p.seqlens_kv = lengths;
  fa::cli::HostBuffer q = random_rows(dtype, B * H * kDim, 10), o1(B * H * kDim * 2), o2(o1.bytes());
  fa::AttentionTensors t;
  t.q = fa::make_view(q.data(), dtype, Layout::kBSH, B, H, 1, kDim);
  t.k = kc;
  t.v = vc;
  t.o = fa::make_view(o1.data(), dtype, Layout::kBSH, B, H, 1, kDim);
  if (fa::cli::kVersion == fa::Version::kFA1) GTEST_SKIP() << "FA1 has no per-sequence key counts";
  ASSERT_TRUE(fa::cli::kForward(p, t).ok());
  fa::AttentionParams pp = p;
  paged.bind(pp);
  t.k = kp;
  t.v = vp;
  t.o = fa::make_view(o2.data(), dtype, Layout::kBSH, B, H, 1, kDim);
  ASSERT_TRUE(fa::cli::kForward(pp, t).ok());
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.bytes()));
  // And the appended token took part: against the float64 reference.
  std::vector<double> ref(static_cast<std::size_t>(B * H * kDim));
  ASSERT_TRUE(fa::reference_forward(pp, t, ref.data(), nullptr).ok());
  for (std::size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(fa::detail::load_as_f32(o2.data(), dtype, static_cast<std::int64_t>(i)), ref[i], 2e-3) << i;
  }
}

TEST(AppendKvCache, BadInputsGetOneLine) {
  const DType dtype = DType::kF32;
  std::vector<float> n(3 * kHeads * kDim), c(2 * 8 * kHeads * kDim);
  const fa::TensorView kn = fa::make_view(n.data(), dtype, Layout::kBSH, 1, kHeads, 3, kDim);
  const fa::TensorView kc = fa::make_view(c.data(), dtype, Layout::kBSH, 2, kHeads, 8, kDim);
  auto expect = [](const fa::Status& s, const std::string& fragment) {
    EXPECT_EQ(s.code(), fa::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  };
  const std::int64_t outside[3] = {0, 16, 1};
  expect(fa::append_kv_cache(kn, kn, outside, kc, kc), "slots[1] = 16 is outside the cache of 2 x 8 tokens");
  const std::int64_t ok[3] = {0, -1, 15};
  EXPECT_TRUE(fa::append_kv_cache(kn, kn, ok, kc, kc).ok());
  expect(fa::append_kv_cache(kn, kn, nullptr, kc, kc), "slots is null");
  const fa::TensorView wide = fa::make_view(c.data(), dtype, Layout::kBSH, 1, kHeads, 8, kDim * 2);
  expect(fa::append_kv_cache(kn, kn, ok, wide, wide), "k_cache: shape [1, 2, 8, 32] does not match expected [1, 2, 8, 16]");
  fa::TensorView half = kc;
  half.dtype = DType::kF16;
  expect(fa::append_kv_cache(kn, kn, ok, half, half), "k_cache: dtype fp16 differs from k_new's dtype fp32");
}

}  // namespace
