// The tile planner: working-set arithmetic, the limit check, automatic
// choice (target table, tuning cache), thread cap and occupancy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/targets.h"
#include "driver/version_entry.h"
#include "flash_attention/flash_attention.h"

namespace {

fa::AttentionParams shape(std::int64_t sq, std::int64_t skv, std::int64_t d) {
  fa::AttentionParams p;
  p.batch = 1;
  p.num_heads = 2;
  p.seq_q = sq;
  p.seq_kv = skv;
  p.head_dim = d;
  return p;
}

// Scoped environment variable.
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const std::string& value) : name(n) { setenv(n, value.c_str(), 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

TEST(Planner, WorkingSetArithmetic) {
  // Qᵀ + Oᵀ: 2 x 64 x 128; Sᵀ: 64 x 128; K + V: 2 x 64 x 64; rows: 3 x 128; all fp32.
  EXPECT_EQ(fa::detail::fa2_working_set_bytes(128, 64, 64), 4u * (16384 + 8192 + 8192 + 384));
  EXPECT_EQ(fa::detail::fa2_working_set_bytes(16, 16, 8), 4u * (256 + 256 + 256 + 48));
  // On the matrix unit P is kept in bf16 pairs as well: 64 x 128 x 2 bytes more
  // (x 4 for fp16's two pieces).
  EXPECT_EQ(fa::detail::fa2_working_set_bytes(128, 64, 64, 2), 4u * (16384 + 8192 + 8192 + 384) + 2u * 8192);
  EXPECT_EQ(fa::detail::fa2_working_set_bytes(128, 64, 64, 4), 4u * (16384 + 8192 + 8192 + 384) + 4u * 8192);
}

// Whether a bf16 plan of this head_dim runs on the pair path here (amx or
// avx512bf16, when the CPU has one and nothing forces another).
bool bf16_on_matrix_unit(const fa::AttentionParams& p) {
  fa::Isa isa;
  return fa::select_isa(p, &isa).ok() && fa::uses_matrix_unit(isa, fa::DType::kBF16, p.head_dim);
}

// The recommended-tile table a bf16 plan of these params reads.
const fa::detail::TileRow* bf16_tile_table(const fa::AttentionParams& p) {
  fa::Isa isa = fa::Isa::kGeneric;
  if (!bf16_on_matrix_unit(p) || !fa::select_isa(p, &isa).ok()) return fa::detail::kRecommendedTiles;
  return isa == fa::Isa::kAmx ? fa::detail::kMatrixUnitTiles : fa::detail::kBf16DotTiles;
}

TEST(Planner, RequestedPlanThatFitsIsKept) {
  fa::AttentionParams p = shape(1000, 1000, 64);
  p.tile_q = 128;
  p.tile_kv = 64;
  fa::TilePlan plan;
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kBF16, &plan).ok());
  EXPECT_EQ(plan.tile_q, 128);
  EXPECT_EQ(plan.tile_kv, 64);
  EXPECT_EQ(plan.source, "caller");
  EXPECT_EQ(plan.working_set_bytes, fa::detail::fa2_working_set_bytes(128, 64, 64, bf16_on_matrix_unit(p) ? 2 : 0));
  EXPECT_GT(plan.limit_bytes, 0u);
}

TEST(Planner, RequestedPlanBeyondTheBudgetIsRefusedWithTheGuidesMessage) {
  fa::AttentionParams p = shape(4096, 4096, 256);
  p.tile_q = 512;
  p.tile_kv = 512;
  fa::TilePlan plan;
  // fp32: the vector unit's working set on every path (fp16 on the amx
  // path keeps P in bf16 pieces as well, 1 MiB more).
  const fa::Status s = fa::fa2_plan(p, fa::DType::kF32, &plan);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("Error: Resource usage exceeds device limit.", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("3078 KiB per thread"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("limit: "), std::string::npos);
  EXPECT_NE(s.message().find("fits"), std::string::npos) << "a suggestion: " << s.message();
  // And fa2_forward refuses it the same way before touching any data.
  fa::AttentionTensors t;  // never read: validation of tensors fails first or the plan does
  EXPECT_FALSE(fa::cli::kForward(p, t).ok());
}

TEST(Planner, AutoUsesTheTargetTableAndShrinksToFit) {
  fa::AttentionParams p = shape(4096, 4096, 64);
  p.tile_q = fa::kTileAuto;
  p.tile_kv = fa::kTileAuto;
  p.threads = 2;  // 64 items: enough for two per thread, so no parallelism cap
  EnvVar cache("FA_TUNING_CACHE", "/nonexistent/dir/cache.txt");
  fa::TilePlan plan;
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kBF16, &plan).ok());
  EXPECT_EQ(plan.source, "target table");
  EXPECT_LE(plan.working_set_bytes, plan.limit_bytes);
  const bool matrix = bf16_on_matrix_unit(p);  // each pair-path engine has a table of its own
  const fa::detail::TileRow& row = bf16_tile_table(p)[1];  // up to 4096 / longer
  if (fa::detail::fa2_working_set_bytes(row.tile_q, row.tile_kv, 64, matrix ? 2 : 0) <= plan.limit_bytes) {
    EXPECT_EQ(plan.tile_q, row.tile_q);
    EXPECT_EQ(plan.tile_kv, row.tile_kv);
  }
  p.causal = true;  // the causal column of the table
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kBF16, &plan).ok());
  EXPECT_EQ(plan.tile_q, row.causal_tile_q);
  EXPECT_EQ(plan.tile_kv, row.causal_tile_kv);
  p.causal = false;
  // Parallelism: one head of 512 queries on 8 threads gets Q tiles of 64.
  fa::AttentionParams few = shape(512, 512, 64);
  few.num_heads = 1;
  few.threads = 8;
  few.tile_q = few.tile_kv = fa::kTileAuto;
  ASSERT_TRUE(fa::fa2_plan(few, fa::DType::kBF16, &plan).ok());
  EXPECT_EQ(plan.tile_q, 64);
  // Decoding: a Q tile longer than the queries is capped at 16.
  p.seq_q = 1;
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kBF16, &plan).ok());
  EXPECT_EQ(plan.tile_q, 16);
}

TEST(Planner, TuningCacheRoundTrip) {
  char dir[] = "/tmp/fa_tuning_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  struct RemoveDir {  // the directory and all in it, however the test ends
    const char* path;
    ~RemoveDir() { std::filesystem::remove_all(path); }
  } remove_dir{dir};
  const std::string path = std::string(dir) + "/sub/cache.txt";
  EnvVar cache("FA_TUNING_CACHE", path);
  fa::AttentionParams p = shape(3000, 3000, 128);
  p.causal = true;
  fa::Isa isa;
  ASSERT_TRUE(fa::select_isa(p, &isa).ok());
  int tq = 0, tkv = 0;
  EXPECT_FALSE(fa::tuning_cache_lookup(fa::Version::kFA2, p, fa::DType::kBF16, isa, &tq, &tkv));
  ASSERT_TRUE(fa::tuning_cache_store(fa::Version::kFA2, p, fa::DType::kBF16, isa, 64, 32, 0.123).ok());
  ASSERT_TRUE(fa::tuning_cache_lookup(fa::Version::kFA2, p, fa::DType::kBF16, isa, &tq, &tkv));
  EXPECT_EQ(tq, 64);
  EXPECT_EQ(tkv, 32);
  // Same shape class (3000 and 4096 share the 4096 bucket); other dtype or mask: no entry.
  fa::AttentionParams same_class = p;
  same_class.seq_q = same_class.seq_kv = 4096;
  EXPECT_TRUE(fa::tuning_cache_lookup(fa::Version::kFA2, same_class, fa::DType::kBF16, isa, &tq, &tkv));
  EXPECT_FALSE(fa::tuning_cache_lookup(fa::Version::kFA2, p, fa::DType::kF16, isa, &tq, &tkv));
  fa::AttentionParams non_causal = p;
  non_causal.causal = false;
  EXPECT_FALSE(fa::tuning_cache_lookup(fa::Version::kFA2, non_causal, fa::DType::kBF16, isa, &tq, &tkv));
  // The file is what another process would read, and auto plans use it.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(" = 64 32 0.123"), std::string::npos) << text;
  p.tile_q = p.tile_kv = fa::kTileAuto;
  fa::TilePlan plan;
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kBF16, &plan).ok());
  EXPECT_EQ(plan.source, "tuning cache");
  EXPECT_EQ(plan.tile_q, 64);
  EXPECT_EQ(plan.tile_kv, 32);
  EXPECT_FALSE(fa::tuning_cache_store(fa::Version::kFA2, p, fa::DType::kBF16, isa, 100, 32, 1.0).ok());
}

TEST(Planner, ThreadCapAndOccupancy) {
  fa::AttentionParams p = shape(128, 128, 64);  // 2 heads x 1 Q tile = 2 items
  p.tile_q = 128;
  p.tile_kv = 64;
  p.threads = 8;
  fa::TilePlan plan;
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kF32, &plan).ok());
  EXPECT_EQ(plan.work_items, 2);
  EXPECT_EQ(plan.threads, 2);  // never more threads than items
  EXPECT_DOUBLE_EQ(plan.occupancy, 1.0);
  p.num_heads = 3;  // 3 equal items on 2 threads: 3 / (2 x 2)
  p.threads = 2;
  ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kF32, &plan).ok());
  EXPECT_NEAR(plan.occupancy, 0.75, 1e-9);
  {
    EnvVar cap("FA_MAX_THREADS", "1");
    ASSERT_TRUE(fa::fa2_plan(p, fa::DType::kF32, &plan).ok());
    EXPECT_EQ(plan.threads, 1);
    EXPECT_DOUBLE_EQ(plan.occupancy, 1.0);
  }
}

}  // namespace

namespace {

// Continuous batching: 16 decoding sequences of 1682 to 31159 keys (drawn
// from 100 ... 32768) on 16 threads.  Unsplit, the longest sequence keeps
// one thread busy while the rest idle; split into chunks of one size the
// items fill the threads, and each sequence is cut only as far as it is
// long.
TEST(Planner, MixedLengthDecodingBatchFillsTheThreads) {
  const std::int32_t lengths[16] = {10711, 31159, 5043, 13037, 21429, 1682, 2473, 27011,
                                    17659, 3184,  12082, 19196, 2000,  29909, 16727, 7135};
  fa::AttentionParams p;
  p.batch = 16;
  p.seq_q = 1;
  p.seq_kv = 32768;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.threads = 16;
  p.seqlens_kv = lengths;
  fa::TilePlan plan;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kF16, &plan).ok());
  EXPECT_GE(plan.occupancy, 0.9);
  EXPECT_GT(plan.num_splits, 1);
  EXPECT_EQ(plan.num_splits, (31159 + plan.split_keys - 1) / plan.split_keys);  // the longest sequence's
  EXPECT_EQ(plan.threads, 16);
  p.num_splits = 1;
  fa::TilePlan unsplit;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kF16, &unsplit).ok());
  EXPECT_EQ(unsplit.num_splits, 1);
  EXPECT_LT(unsplit.occupancy, 0.6);
}

// Decoding packs every head of the batch into an item.  Where K/V heads lie
// side by side (BSH), the item reads each tile for all of them, and the
// K/V tile shrinks until every packed head's current and next tile fit in
// half the L2; in BNSD it runs them head after head, so only one head's
// tiles are in flight and its tile is that of a single K/V head's call.
TEST(Planner, DecodingTilesHoldTheKvHeadsInFlight) {
  fa::AttentionParams p;
  p.seq_q = 1;
  p.seq_kv = 32768;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.threads = 2;
  const std::size_t key_bytes = 128 * 2 * 2;  // K and V, fp16
  fa::TilePlan side, bnsd, one_head;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kF16, &side).ok());
  const std::size_t kv_heads_per_item = static_cast<std::size_t>(side.pack_gqa / 4);
  EXPECT_EQ(kv_heads_per_item, 8u);
  EXPECT_LE(2 * std::size_t(side.tile_kv) * kv_heads_per_item * key_bytes, side.limit_bytes / 2);
  p.kv_heads_side_by_side = false;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kF16, &bnsd).ok());
  EXPECT_EQ(bnsd.pack_gqa, side.pack_gqa);
  EXPECT_GE(bnsd.tile_kv, side.tile_kv);
  p.num_heads = 4;
  p.num_kv_heads = 1;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kF16, &one_head).ok());
  EXPECT_EQ(bnsd.tile_kv, one_head.tile_kv);
  if (2 * std::size_t(one_head.tile_kv) * kv_heads_per_item * key_bytes > side.limit_bytes / 2) {
    EXPECT_LT(side.tile_kv, bnsd.tile_kv);  // the rule cut the side-by-side tile
  }
}

// A short-query call on `isa` over 8192 keys (seq_q set by the caller).
fa::AttentionParams short_query_params(fa::Isa isa, int heads, int kv_heads, int head_dim) {
  fa::AttentionParams p;
  p.seq_kv = 8192;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.isa = isa;
  return p;
}

// On avx2 a head with no group takes the FMA row path up to 12 rows in bf16
// and 8 in fp16 over its own K/V (kRowPathAvx2Bf16Rows, kRowPathHalfRows),
// and 4 in fp32, over a quantized cache, or with a GQA group.
TEST(Planner, Avx2SixteenBitHeadsTakeTheRowPathFurther) {
  if (!fa::isa_available(fa::Isa::kAvx2)) GTEST_SKIP() << "avx2 path not available";
  fa::AttentionParams p = short_query_params(fa::Isa::kAvx2, 8, 8, 128);
  p.seq_q = 12;
  for (const fa::DType q : {fa::DType::kBF16, fa::DType::kF16, fa::DType::kF32}) {
    fa::TilePlan plan;
    const fa::Status s = fa::plan(fa::Version::kFA2, p, q, &plan);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(plan.row_rows, q == fa::DType::kBF16 ? 12 : q == fa::DType::kF16 ? 8 : 4) << fa::dtype_name(q);
  }
  fa::TilePlan fp8_plan, group_plan;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kF16, fa::DType::kFP8E4M3, &fp8_plan).ok());
  EXPECT_EQ(fp8_plan.row_rows, 4);
  p.num_heads = 32;
  ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, fa::DType::kBF16, &group_plan).ok());
  EXPECT_EQ(group_plan.row_rows, 4);
}

// Short queries over an FP8 cache on the avx512bf16 path: up to 24 rows a
// head with bf16 Q, 8 with fp16 Q, take the row path, whose products are
// VDPBF16PS pair dot products there (the tile loops' are FMA on tiles
// widened to fp32), GQA groups packed into its items; more rows of a GQA
// group take the packed tile.  An int8 cache keeps the row path to 4 rows.
TEST(Planner, Fp8CacheShortQueriesTakeThePairRowPath) {
  if (!fa::isa_available(fa::Isa::kAvx512Bf16)) GTEST_SKIP() << "avx512bf16 path not available";
  fa::AttentionParams p = short_query_params(fa::Isa::kAvx512Bf16, 32, 8, 96);
  for (const fa::DType q : {fa::DType::kBF16, fa::DType::kF16}) {
    const int row_rows = q == fa::DType::kBF16 ? 24 : 8;
    for (const int rows : {5, 8, 9, 24, 25}) {
      p.seq_q = rows;
      fa::TilePlan plan;
      ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, q, fa::DType::kFP8E4M3, &plan).ok());
      EXPECT_EQ(plan.row_rows, row_rows) << rows;
      EXPECT_EQ(plan.pack_tile, rows > row_rows) << rows;
    }
    p.seq_q = 5;
    fa::TilePlan int8_plan;
    ASSERT_TRUE(fa::plan(fa::Version::kFA2, p, q, fa::DType::kI8, &int8_plan).ok());
    EXPECT_EQ(int8_plan.row_rows, 4);
    EXPECT_TRUE(int8_plan.pack_tile);
  }
}

}  // namespace
