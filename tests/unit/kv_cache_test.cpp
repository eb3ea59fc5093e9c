// append_kv_cache: new tokens' K/V rows land in their slots of a contiguous
// cache or a paged pool, nothing else is written, a decoding step built on
// it gives the same bits through either cache, and a quantized cache's rows
// are the new values quantized (int8 with a row scale, FP8 with a head's
// factor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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

// A quantized cache: each named row holds the new token's values quantized
// (int8: codes within [-127, 127], the row's largest magnitude at +-127, each
// code the nearest to value / scale; FP8: the nearest code to value / the
// head's factor, e4m3 saturating), each int8 row's scale written; rows
// not named and their scales stay as they were; a NaN in a row makes its
// int8 scale NaN, so the row reads back NaN.
TEST(AppendKvCache, QuantizesIntoInt8AndFp8Caches) {
  for (DType cache_dtype : {DType::kI8, DType::kFP8E4M3, DType::kFP8E5M2}) {
    for (DType new_dtype : {DType::kBF16, DType::kF32}) {
      const Layout layout = Layout::kBSH;
      const std::int64_t B = 2, S = 6, T = 3;
      const std::int64_t slots[T] = {1 * S + 2, 0 * S + 5, -1};
      fa::cli::HostBuffer k_new = random_rows(new_dtype, T * kHeads * kDim, 11);
      fa::cli::HostBuffer v_new = random_rows(new_dtype, T * kHeads * kDim, 12);
      const fa::TensorView kn = fa::make_view(k_new.data(), new_dtype, layout, 1, kHeads, T, kDim);
      const fa::TensorView vn = fa::make_view(v_new.data(), new_dtype, layout, 1, kHeads, T, kDim);
      // Token 1's first K row gets a NaN: its int8 scale must come out NaN.
      fa::detail::store_from_f32(k_new.data(), new_dtype, kn.offset(0, 0, 1, 3), std::numeric_limits<float>::quiet_NaN());
      std::vector<std::int8_t> k_cache(B * S * kHeads * kDim, 5), v_cache(k_cache.size(), 5);
      std::vector<float> k_scale(B * S * kHeads, -1.0f), v_scale(k_scale.size(), -1.0f);
      const fa::TensorView kc = fa::make_view(k_cache.data(), cache_dtype, layout, B, kHeads, S, kDim);
      const fa::TensorView vc = fa::make_view(v_cache.data(), cache_dtype, layout, B, kHeads, S, kDim);
      const fa::TensorView scale_view = fa::make_view(nullptr, DType::kF32, layout, B, kHeads, S, 1);
      fa::KvCacheScales scales;
      const float descale[kHeads] = {0.01f, 0.03f};
      if (cache_dtype == DType::kI8) {
        scales.k = fa::make_view(k_scale.data(), DType::kF32, layout, B, kHeads, S, 1);
        scales.v = fa::make_view(v_scale.data(), DType::kF32, layout, B, kHeads, S, 1);
      } else {
        scales.descale_k = scales.descale_v = descale;
        scales.descale_k_count = scales.descale_v_count = kHeads;
      }
      ASSERT_TRUE(fa::append_kv_cache(kn, vn, slots, kc, vc, scales, 2).ok()) << fa::dtype_name(cache_dtype);
      const std::string what = std::string(fa::dtype_name(new_dtype)) + " into " + std::string(fa::dtype_name(cache_dtype));
      for (std::int64_t b = 0; b < B; ++b) {
        for (std::int64_t s = 0; s < S; ++s) {
          std::int64_t from = -1;
          for (std::int64_t t = 0; t < T; ++t) from = slots[t] == b * S + s ? t : from;
          for (std::int64_t h = 0; h < kHeads; ++h) {
            for (auto [cache, scale, fresh, fresh_view] : {std::tuple{&k_cache, &k_scale, &k_new, kn},
                                                           std::tuple{&v_cache, &v_scale, &v_new, vn}}) {
              const std::int8_t* row = cache->data() + kc.offset(b, h, s, 0);
              const float row_scale = (*scale)[static_cast<std::size_t>(scale_view.offset(b, h, s, 0))];
              if (from < 0 || cache_dtype != DType::kI8) {
                EXPECT_EQ(row_scale, -1.0f) << what;  // no scale written
              }
              if (from < 0) {  // untouched
                for (std::int64_t d = 0; d < kDim; ++d) EXPECT_EQ(row[d], 5) << what;
                continue;
              }
              std::vector<double> x(kDim);
              double amax = 0.0;
              bool nan = false;
              for (std::int64_t d = 0; d < kDim; ++d) {
                x[d] = fa::detail::load_as_f32(fresh->data(), new_dtype, fresh_view.offset(0, h, from, d));
                nan = nan || std::isnan(x[d]);
                amax = std::max(amax, std::abs(x[d]));
              }
              if (cache_dtype == DType::kI8) {
                if (nan) {
                  EXPECT_TRUE(std::isnan(row_scale)) << what << ": a row with a NaN keeps a NaN scale";
                  continue;
                }
                EXPECT_NEAR(row_scale, amax / 127.0, amax / 127.0 * 1e-6) << what;
                int top = 0;
                for (std::int64_t d = 0; d < kDim; ++d) {
                  top = std::max(top, std::abs(int(row[d])));
                  EXPECT_LE(std::abs(row[d] * double(row_scale) - x[d]), 0.5 * row_scale * (1 + 1e-5)) << what << " d " << d;
                }
                EXPECT_EQ(top, 127) << what;
              } else {
                for (std::int64_t d = 0; d < kDim; ++d) {
                  const float scaled = static_cast<float>(x[d]) / descale[h];
                  const std::uint8_t want = cache_dtype == DType::kFP8E4M3 ? fa::detail::f32_to_fp8_e4m3(scaled)
                                                                           : fa::detail::f32_to_fp8_e5m2(scaled);
                  EXPECT_EQ(static_cast<std::uint8_t>(row[d]), want) << what << " d " << d;
                }
              }
            }
          }
        }
      }
    }
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
  // Quantized caches: an int8 cache needs its scale views; scales and
  // factors only where they apply.
  std::vector<std::int8_t> q8(c.size());
  std::vector<float> sc(2 * 8 * kHeads);
  const fa::TensorView k8 = fa::make_view(q8.data(), DType::kI8, Layout::kBSH, 2, kHeads, 8, kDim);
  fa::KvCacheScales scales;
  expect(fa::append_kv_cache(kn, kn, ok, k8, k8, scales), "scales.k: an int8 cache needs its scale view");
  scales.k = scales.v = fa::make_view(sc.data(), DType::kF32, Layout::kBSH, 2, kHeads, 4, 1);
  expect(fa::append_kv_cache(kn, kn, ok, k8, k8, scales), "scales.k: shape [2, 2, 4, 1] does not match expected [2, 2, 8, 1]");
  scales.k = scales.v = fa::make_view(sc.data(), DType::kF32, Layout::kBSH, 2, kHeads, 8, 1);
  EXPECT_TRUE(fa::append_kv_cache(kn, kn, ok, k8, k8, scales).ok());
  expect(fa::append_kv_cache(kn, kn, ok, kc, kc, scales), "scales.k applies to int8 caches only (the cache is fp32)");
  fa::TensorView e4 = k8;
  e4.dtype = DType::kFP8E4M3;
  const float factors[3] = {1.0f, 0.0f, 2.0f};
  fa::KvCacheScales fp8;
  fp8.descale_k = factors;
  fp8.descale_k_count = 3;
  expect(fa::append_kv_cache(kn, kn, ok, e4, e4, fp8), "scales.descale_k: 3 factors (expected 1, or one per K/V head: 2)");
  fp8.descale_k_count = 2;
  expect(fa::append_kv_cache(kn, kn, ok, e4, e4, fp8), "scales.descale_k[1] must be a finite positive number");
  expect(fa::append_kv_cache(kn, kn, ok, k8, k8, fp8), "scales.k: an int8 cache needs its scale view");
  const fa::TensorView n8 = fa::make_view(q8.data(), DType::kI8, Layout::kBSH, 1, kHeads, 3, kDim);
  expect(fa::append_kv_cache(n8, n8, ok, e4, e4), "k_cache: dtype fp8_e4m3 differs from k_new's dtype int8");
}

}  // namespace
