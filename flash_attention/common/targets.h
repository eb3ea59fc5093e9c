// The hardware table: for each CPU target, the resources a tile plan uses
// and the recommended tiles by sequence length.  The machine's limits live
// here and nowhere else (the guide's per-NPU table, for CPUs).
//
// Header-only plain data and arithmetic, so the configure-time check
// (cmake/planner_check.cpp) compiles it without the rest of the library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fa::detail {

struct TargetInfo {
  const char* name;          // generic, avx2, avx512, avx512bf16, amx (cuda sm80/sm90: later rows)
  int vector_registers;      // architectural vector registers
  int vector_bytes;          // bytes per vector register
  int matrix_tiles;          // matrix-unit tile registers (AMX: 8 of 16 rows x 64 bytes); 0 = none
  std::size_t l1d_bytes;     // per-core L1D assumed when the CPU cannot be read
  std::size_t l2_bytes;      // per-core L2 assumed when the CPU cannot be read: the plan's budget
};

// Defaults are deliberately common values, not the largest parts: the budget
// at configure time must hold on the machines the binary will meet.
// The amx row's matrix unit: 8 tile registers of 16 rows x 64 bytes.  CUDA
// targets (sm80, sm90: shared memory and registers per block) will be rows
// of their own.
inline constexpr TargetInfo kTargets[] = {
    {"generic", 16, 16, 0, 32 * 1024, 512 * 1024},
    {"avx2", 16, 32, 0, 32 * 1024, 1024 * 1024},
    {"avx512", 32, 64, 0, 32 * 1024, 1024 * 1024},
    {"avx512bf16", 32, 64, 0, 32 * 1024, 1024 * 1024},
    {"amx", 32, 64, 8, 48 * 1024, 2048 * 1024},
};

inline const TargetInfo* find_target(const char* name) {
  for (const TargetInfo& t : kTargets) {
    const char* a = t.name;
    const char* b = name;
    while (*a && *a == *b) ++a, ++b;
    if (*a == *b) return &t;
  }
  return nullptr;
}

// Recommended tiles by sequence length, without and with a causal mask.
// The guide's table (<=512: 64x64, 512-2048: 128x64, 2048-4096: 128x128,
// >4096: 256x128) replaced by what the tile sweep measured on a 2-core
// Zen 4 (docs/PERF.md, 2026-12-02): without a mask 256x128 won at every
// length (Q tiles re-read K/V less often), under a causal mask 128-row tiles
// won (the diagonal tiles' masked half grows with the tile).  The planner
// then caps tile_q at the sequence, halves it while the (batch, head, Q tile)
// items would not give every thread two, and shrinks the plan to the L2 budget.
struct TileRow {
  std::int64_t max_seq;  // rows apply to sequences up to this length
  int tile_q, tile_kv;
  int causal_tile_q, causal_tile_kv;
};
inline constexpr TileRow kRecommendedTiles[] = {
    {512, 256, 128, 128, 64},
    {4096, 256, 128, 128, 64},
    {INT64_MAX, 256, 128, 128, 64},
};

// Bytes of the per-thread working set of the FA2 tile loop (the SIMD paths):
// Qᵀ and Oᵀ [head_dim][tile_q] fp32, Sᵀ/Pᵀ [tile_kv][tile_q] fp32, the K and
// V tiles [tile_kv][head_dim] (fp32 buffers, for every dtype), and three row
// vectors.  On the pair path (amx, avx512bf16) P also lives as bf16 pairs:
// `matrix_p_bytes` per element of the tile_kv x tile_q tile (2 for bf16, 4
// for fp16's two pieces).
inline std::size_t fa2_working_set_bytes(int tile_q, int tile_kv, int head_dim, int matrix_p_bytes = 0) {
  const std::size_t tq = tile_q, tkv = tile_kv, d = head_dim;
  return 4 * (2 * d * tq + tkv * tq + 2 * tkv * d + 3 * tq) + std::size_t(matrix_p_bytes) * tkv * tq;
}

// A version's working set: FA3 keeps two Q tiles' state and two K/V tiles
// per thread (`q_tiles_per_thread` 2), FA1 and FA2 one of each.
inline std::size_t version_working_set_bytes(int q_tiles_per_thread, int tile_q, int tile_kv, int head_dim,
                                             int matrix_p_bytes = 0) {
  return std::size_t(q_tiles_per_thread) * fa2_working_set_bytes(tile_q, tile_kv, head_dim, matrix_p_bytes);
}

// Recommended tiles when the products run on the matrix unit (amx), by
// the same sweep on a 2-core Xeon with AMX (docs/PERF.md, 2026-12-02): the
// tile unit wants long Q tiles (the packing of Q and P amortized over more
// keys) and long K/V tiles (longer chains of products per accumulator):
// 256 x 256 won at S = 512, 2048 and 4096 without a mask and at 2048 and
// 4096 with one; at S = 512 causal, 128 x 128 (the diagonal tiles' masked
// half weighs more in a short sequence).
inline constexpr TileRow kMatrixUnitTiles[] = {
    {512, 256, 256, 128, 128},
    {INT64_MAX, 256, 256, 256, 256},
};

// Recommended tiles for bf16 on VDPBF16PS (avx512bf16), by the same sweep on
// a 2-core Zen 4 (docs/PERF.md, 2026-12-02): 256 x 128 without a mask at
// S = 4096 (256 x 256 was 4% slower), 128 x 128 at S = 512 and under a
// causal mask.
inline constexpr TileRow kBf16DotTiles[] = {
    {512, 128, 128, 128, 128},
    {INT64_MAX, 256, 128, 128, 128},
};

}  // namespace fa::detail
