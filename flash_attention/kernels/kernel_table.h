// What one instruction-set path provides for one version's loop, and the job
// description every version's loop receives.  Plain data only: this header
// is shared by translation units compiled with different instruction-set
// flags.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common/dropout.h"
#include "../common/mask.h"
#include "flash_attention/flash_attention.h"
#include "flash_attention/testing.h"

namespace fa::detail {

// Q tiles this short run row by row with keys, not query rows, in the vector
// lanes: decoding (one query row) would otherwise idle all lanes but one.
// Where the row path's products are VDPBF16PS pair dot products (row_path.h:
// on the avx512bf16 path, bf16 Q, K and V with head_dim a multiple of 32,
// or an FP8 cache read with 16-bit Q) a row costs about half as much, and
// tiles of up to kRowPathPairRows take it with bf16 Q, 8 with fp16 Q over
// an FP8 cache (TilePlan::row_rows, AttentionJob::row_rows): a head's 9
// to 24 bf16 rows took 0.5-0.9x the time of a 16- or 32-row pair tile,
// whose packing of V is spread over few rows, and 32 rows about the same
// (8 heads, 4096 keys; an FP8 cache 0.5-0.9x its FMA tile loop, but fp16 Q
// over FP8 1.2-1.3x; Zen 4, docs/PERF.md).  A GQA group of more than
// kRowPathPairGroupRows bf16 rows takes the packed tile (tile_planner.cpp).  For an FP8 cache the tile
// loops are the FMA products on tiles widened to fp32: 8 rows there took
// about 3x the time of 4 on the row path (Zen 4, docs/PERF.md).  So do fp16 queries of 5 to 8
// rows with no GQA group to pack, where the vector has 16 lanes: the FMA
// tile loop left half of a 16-row tile's lanes idle, and the row path in
// two blocks of 4 rows took 0.4-0.6x its time (8 heads, 4096 keys, Zen 4;
// on the amx path 0.42-0.63x that of the tile of two bf16 pieces, Xeon);
// so do fp16 queries over an int8 or FP8 cache (on the Xeon, 8 rows:
// 0.34-0.56x the FMA tile loop's time on amx, 0.42-0.50x on avx512 and
// avx512bf16's int8);
// packed GQA groups of 8 rows, bf16 without pair products and fp32 gained
// nothing or lost there, and keep 4.  On avx2 (8 lanes, no pair engine)
// 16-bit heads with no group take it up to 12 (bf16) or 8 (fp16) rows
// (kRowPathAvx2Bf16Rows, below).
inline constexpr int kRowPathMaxRows = 4;
inline constexpr int kRowPathPairRows = 24;
// GQA groups of up to this many rows (the group's heads times the queries)
// take the row path's pair products too, each K/V tile read once for the
// group; larger ones take the packed pair tile.  12 to 24 rows took
// 0.55-0.86x the packed tile's time, 32 rows 0.9-1.1x (GQA 4 and 8, 4096
// and 32768 keys, BNSD, Zen 4, docs/PERF.md).
inline constexpr int kRowPathPairGroupRows = 24;
inline constexpr int kRowPathHalfRows = 8;
// On avx2 (no pair engine, 8 lanes) a head with no group, 16-bit Q over its
// own K/V, takes the FMA row path up to kRowPathAvx2Bf16Rows bf16 rows (6
// rows 0.55-0.67x the half-empty 16-row tile's time, 8 rows 0.7-0.8x, 12
// rows 0.83-0.9x, 16 rows 1.05-1.25x) and kRowPathHalfRows fp16 ones (6 rows
// 0.62-0.8x, 8 rows 0.75-1.05x, 12 rows 1.0-1.1x): 8/8 heads, 16384 keys, D
// 64 and 128, Zen 3, docs/PERF.md.  fp32 (1.2x the tile's time at 8 rows)
// and quantized caches (FP8: 1.5x) keep kRowPathMaxRows, as do GQA groups,
// whose rows the row path reads K/V for together up to 4 queries a head
// (level with the packed tile at 8).
inline constexpr int kRowPathAvx2Bf16Rows = 12;
// (static: this header is compiled with every path's flags, see DESIGN.)
static constexpr bool row_path_has_pair_products(Isa isa, DType dtype, DType kv_dtype, std::int64_t head_dim) {
  if (isa != Isa::kAvx512Bf16) return false;
  if (is_fp8(kv_dtype)) return dtype == DType::kBF16 || dtype == DType::kF16;
  return dtype == DType::kBF16 && kv_dtype == DType::kBF16 && head_dim % 32 == 0;
}
// The most K/V heads one packed tile item walks together (TilePlan::pack_gqa
// up to this many GQA groups; tile_scheduler.h, tile_kv_heads).
inline constexpr int kMaxTileKvHeads = 16;
// A paged cache's K/V tiles lie in one block each, but a packed tile that
// reads K/V as rows where they lie (below) takes this many keys over blocks
// of half as many (16: the pair path's tiles are multiples of 32 keys, and
// a 16-key tile ran the FMA loop at a quarter of the speed).
inline constexpr int kPagedSplitTileKv = 32;
// Whether the tile path reads bf16 K and V as rows where they lie (the AMX
// engine, head_dim a multiple of 32; amx_tile_path.h): a packed GQA group's
// tile then streams K/V with no packing, at the tile unit's speed.  So does
// a quantized cache (FP8, int8) with bf16 Q, each tile widened into bf16
// rows (bf16_pair_path.h, pair_path_runs).
static constexpr bool tile_reads_kv_rows(Isa isa, DType dtype, DType kv_dtype, std::int64_t head_dim) {
  return isa == Isa::kAmx && dtype == DType::kBF16 &&
         (kv_dtype == DType::kBF16 || is_fp8(kv_dtype) || kv_dtype == DType::kI8) && head_dim % 32 == 0;
}
// fp16 on the tile unit: a packed GQA tile of at most kFp16RowsMaxRows rows
// (a group's heads times at most kRowPathHalfRows queries: decoding and
// speculative decoding) reads K/V as rows too, each K/V tile widened into
// rows of two bf16 pieces a value (PairTileSteps::widen_fp16_rows), at
// head_dims of 64 and more, multiples of 32.  Longer tiles pack each K/V
// tile for the products (the rows engine spends twice the second product's
// tile work from 9 rows, and with three products a piece that outgrows the
// packing it saves).  A rule of the call's shape, not of an item's rows, so
// that a packed tile gives the bits of the same call with each K/V head
// repeated (one head's tile of 9 or more queries packs).
inline constexpr int kFp16RowsMaxRows = 32;
static constexpr bool fp16_tile_reads_rows(Isa isa, DType dtype, DType kv_dtype, std::int64_t head_dim, std::int64_t group,
                                           std::int64_t seq_q) {
  return isa == Isa::kAmx && dtype == DType::kF16 && kv_dtype == DType::kF16 && head_dim % 32 == 0 && head_dim >= 64 &&
         seq_q <= kRowPathHalfRows && group * seq_q <= kFp16RowsMaxRows;
}
static constexpr int row_path_max_rows(Isa isa, DType dtype, DType kv_dtype, std::int64_t head_dim, std::int64_t group) {
  if (row_path_has_pair_products(isa, dtype, kv_dtype, head_dim)) return dtype == DType::kBF16 ? kRowPathPairRows : kRowPathHalfRows;
  if (isa == Isa::kAvx2 && (dtype == DType::kBF16 || dtype == DType::kF16) && kv_dtype == dtype && group == 1) {
    return dtype == DType::kBF16 ? kRowPathAvx2Bf16Rows : kRowPathHalfRows;
  }
  const bool lanes16 = isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16 || isa == Isa::kAmx;
  if (lanes16 && dtype == DType::kF16 && (kv_dtype == DType::kF16 || kv_dtype == DType::kI8 || is_fp8(kv_dtype)) && group == 1) return kRowPathHalfRows;
  return kRowPathMaxRows;
}

// The stages of the tile loops that FA_STAGE_TIMING=1 times (TSC cycles,
// summed over items and threads): Q loaded and the row state set up; K/V
// tiles converted or packed; Q·Kᵀ; the softmax with masks and modifiers (and
// P packed for the tile unit); O rescaled; P·V; the epilogue (O and LSE).
enum TileStage : int {
  kStageQ,
  kStageKv,
  kStageScores,
  kStageSoftmax,
  kStageRescale,
  kStagePv,
  kStageEpilogue,
  kStageCount
};

static_assert(kStageCount == kProfileStages, "the profile reports every stage of the tile loops");

// AttentionParams::profile: what the scheduler records of one item (TSC).
struct ItemRecord {
  std::uint64_t begin, end;
  std::uint64_t stage_cycles[kStageCount];
  std::int32_t worker;
};

// Everything a version's tile loop needs, resolved once by the dispatcher
// (common/forward_dispatch.cpp), so the per-ISA code touches no optional or
// inline helper of the public API.
struct AttentionJob {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;             // may be null
  std::int64_t lse_strides[2];  // batch, head (elements); rows are contiguous
  const std::int8_t* mask;  // may be null
  DType dtype;            // of Q (and of K and V unless kv_dtype differs)
  // K's and V's: dtype, or a quantized cache's int8 / FP8 with fp16 or bf16
  // Q (dequantized as read: FP8 through descale[1] and [2]; int8 through
  // kv_scale, element [b * s[0] + h * s[1] + row * s[2]] of
  // kv_scale_strides[K or V], the row a pool row when paged).
  DType kv_dtype;
  const float* kv_scale[2];
  std::int64_t kv_scale_strides[2][3];
  DType o_dtype;          // of O: dtype, or for FP8 inputs fp32, fp16 or bf16
  // FP8 dequantization factors of Q, K and V (null: 1), element [head *
  // descale_stride] (stride 0: one per tensor; 1: one per head).
  const float* descale[3];
  std::int64_t descale_stride[3];
  std::int64_t batch, seq_q, seq_kv, heads, kv_group, head_dim;
  std::int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3];  // batch, head, seq (elements)
  float scale_log2;       // softmax scale * log2(e)
  KeyWindow window;       // causal / sparse-mode key window
  const float* sinks;     // per-head sink logits (scaled-score units), may be null
  // Score modifiers (see AttentionParams): softcap in log2 units (cap *
  // log2(e); 0 = off), ALiBi slopes, additive bias [bias_heads][seq_q][seq_kv].
  float softcap_log2;
  const float* alibi_slopes;
  const float* bias;
  std::int64_t bias_head_stride;  // 0 when one bias is shared by all heads
  Dropout dropout;
  int tile_q, tile_kv, threads;
  std::int64_t q_tiles;
  float* scratch;          // threads * per_thread_floats floats, 64-byte aligned
  std::size_t per_thread_floats;
  // Split-KV: keys [s * split_keys, (s + 1) * split_keys) form chunk s.  With
  // more than one chunk, items write normalized fp32 partial outputs
  // [split][batch * heads][seq_q][head_dim] and natural-log LSEs
  // [split][batch * heads][seq_q] instead of O, and the dispatcher combines.
  int num_splits;
  std::int64_t split_keys;
  // Paged KV cache: K/V row j of batch b lies in pool block
  // block_table[b * blocks_per_seq + (j >> block_shift)] (kv_row); null for
  // contiguous K/V.  With a table the K/V batch strides are 0 and strides[2]
  // step through the pool's tokens; tiles never cross a block.
  const std::int32_t* block_table;
  std::int64_t blocks_per_seq;
  int block_shift;
  // GQA packing: query heads per item (1 = none; else the whole group of a
  // K/V head, for short query tiles, so each K/V tile is read once per group;
  // or the groups of several K/V heads, which the row path reads side by
  // side and a packed tile item walks together, a tile each: tile_kv_heads).
  int pack_group;
  // Whether a packed item runs the tile path (short queries of 5 to 32 rows)
  // rather than the row path: its tile holds the query rows of its
  // kv_group heads, head after head, in tile_q lanes, q_step rows of each
  // head a tile (tile_q / kv_group; else q_step = tile_q).
  bool pack_tile;
  int q_step;
  int row_rows;  // a Q tile of at most this many rows runs the row path (TilePlan::row_rows)
  float* partial_o;
  float* partial_lse;
  // The amx path's K/V tiles packed once per call and shared by every Q tile
  // and every query head of a GQA group (null: each item packs its own):
  // tile t of (batch b, K/V head hk) in slot (b * kv_heads + hk) *
  // kv_pack_tiles + t; its state in kv_pack_state (0 empty, 1 being packed,
  // 2 ready), zeroed by the dispatcher.  Sized by fa2_kv_pack_bytes.
  std::uint16_t* kv_pack;
  std::uint32_t* kv_pack_state;
  std::int64_t kv_pack_tiles;
  // Software prefetch of the next K/V tile on the FMA loop (FA_ENABLE_ASYNC,
  // or AttentionParams::async_prefetch); loops without it ignore it.
  bool async_prefetch;
  // FA_STAGE_TIMING: kStageCount cycle counters the tile loops add to (null:
  // not timed; the row path for short Q tiles is never timed).
  std::uint64_t* stage_cycles;
  // AttentionParams::profile: one zeroed record per item of the parallel
  // loop, indexed by its item number (null: not profiling).
  ItemRecord* item_records;
};

struct KernelTable {
  Version version;  // whose loop this is (each version's library links its own)
  Isa isa;
  const char* name;
  // Scratch floats one thread needs for a job (its shape and plan set).
  std::size_t (*workspace_floats)(const AttentionJob& job);
  // Bytes of the K/V packing shared by all items of a job with every other
  // field set (states, 64-byte aligned, then slots); 0 when the job would
  // not use or gain from one.
  std::size_t (*kv_pack_bytes)(const AttentionJob& job);
  // Work items of one job (the dispatcher's running counts for varlen).
  std::int64_t (*items)(const AttentionJob& job);
  // Runs the items of `count` jobs (one per sequence for variable-length
  // calls) in one parallel loop; they share dtype, tiles, threads and
  // scratch.  item_ends[j] = items of jobs 0..j (used when count > 1).
  void (*run)(const AttentionJob* jobs, const std::int64_t* item_ends, std::size_t count);
  // out[i] = 2^in[i] with the softmax's exp2 (tests check its accuracy).
  void (*exp2_array)(const float* in, float* out, int n);
  // n (a multiple of 8) elements of `dtype` widened to fp32 as the tile
  // loops widen K and V, or (row_path) as the row path does in registers
  // (tests check the 8-bit conversions).
  void (*widen_array)(DType dtype, bool row_path, const void* in, float* out, int n);
  // n (a multiple of 128) FP8 codes widened to bf16 by the row path's byte
  // tables, taken back to fp32 in order: as K is (value_pairs false: 64
  // codes a step) or as V's key pairs (true: codes [0, 64) and [64, 128) of
  // each 128 as two keys' rows).  False on paths without the tables.
  bool (*widen_pairs_array)(DType dtype, bool value_pairs, const void* in, float* out, int n);
  // FMA throughput of this path's vector unit on the calling thread, GFLOP/s.
  double (*fma_peak_one_thread)(double seconds);
  // The matrix unit's bf16 throughput on the calling thread, GFLOP/s; null
  // on paths without one.
  double (*matrix_peak_one_thread)(double seconds);
  // Bytes per second the calling thread reads streaming `bytes` at `data`
  // (64-byte aligned) over and over with this path's loads.
  double (*read_rate_one_thread)(const void* data, std::size_t bytes, double seconds);
  // The tile loop's stages timed one by one (fa2/fa2_stage_timer.h); FA2's
  // tables only, null in the others.
  bool (*time_stages)(const testing::StageConfig& cfg, testing::StageReport* out);
};

// nullptr when the path is not built.
const KernelTable* kernel_table(Isa isa);

}  // namespace fa::detail
