// FA3's schedule reorders two Q tiles' steps but keeps each tile's
// operations, and their order, FA2's: at the same tiles its output must
// equal FA2's bit for bit, on every kernel path this build and CPU run (the
// amx path's tiles emulated in FA_AMX_EMULATION builds, so the sanitizer
// run checks the pair schedule on the tile unit too).  This program links
// both versions' libraries, as a Python process that imports the package
// does (each library keeps its own loop; their shared API is the same code).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype_convert.h"
#include "flash_attention/flash_attention.h"

namespace {

using fa::DType;
using fa::Isa;

std::vector<std::uint8_t> random_tensor(std::int64_t n, DType dtype, std::uint64_t seed) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) * fa::dtype_size(dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(seed >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    fa::detail::store_from_f32(bytes.data(), dtype, i, 4.0f * u - 2.0f);
  }
  return bytes;
}

class VersionsAgree : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

TEST_P(VersionsAgree, Fa3EqualsFa2BitForBit) {
  const auto [isa, dtype] = GetParam();
  if (!fa::isa_available(isa)) GTEST_SKIP() << fa::isa_name(isa) << " is not available here";
  fa::AttentionParams p;
  p.batch = 1;
  p.seq_q = 300;
  p.seq_kv = 333;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.causal = true;
  p.tile_q = 32;
  p.tile_kv = 64;
  p.threads = 2;
  p.isa = isa;
  auto q = random_tensor(p.batch * p.num_heads * p.seq_q * p.head_dim, dtype, 1);
  auto k = random_tensor(p.batch * p.num_kv_heads * p.seq_kv * p.head_dim, dtype, 2);
  auto v = random_tensor(p.batch * p.num_kv_heads * p.seq_kv * p.head_dim, dtype, 3);
  std::vector<std::uint8_t> out[2];
  std::vector<float> lse[2];
  for (int i = 0; i < 2; ++i) {
    out[i].assign(q.size(), 0);
    lse[i].assign(static_cast<std::size_t>(p.batch * p.num_heads * p.seq_q), 0.0f);
    fa::AttentionTensors t;
    t.q = fa::make_view(q.data(), dtype, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
    t.k = fa::make_view(k.data(), dtype, fa::Layout::kBSH, p.batch, p.num_kv_heads, p.seq_kv, p.head_dim);
    t.v = fa::make_view(v.data(), dtype, fa::Layout::kBSH, p.batch, p.num_kv_heads, p.seq_kv, p.head_dim);
    t.o = fa::make_view(out[i].data(), dtype, fa::Layout::kBSH, p.batch, p.num_heads, p.seq_q, p.head_dim);
    t.lse = lse[i].data();
    const fa::Status s = i == 0 ? fa::fa2_forward(p, t) : fa::fa3_forward(p, t);
    ASSERT_TRUE(s.ok()) << (i == 0 ? "fa2: " : "fa3: ") << s.message();
  }
  EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size())) << "outputs differ";
  EXPECT_EQ(0, std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * sizeof(float))) << "LSEs differ";
}

INSTANTIATE_TEST_SUITE_P(Paths, VersionsAgree,
                         ::testing::Combine(::testing::Values(Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16,
                                                              Isa::kAmx),
                                            ::testing::Values(DType::kBF16, DType::kF16, DType::kF32)),
                         [](const auto& info) {
                           return std::string(fa::isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(fa::dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
