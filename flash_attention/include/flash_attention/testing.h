// Hooks for the test suite into one kernel path's pieces.  Not a stable API.
#pragma once

#include "flash_attention/flash_attention.h"

namespace fa::testing {

// out[i] = the softmax's exp2(in[i]) as computed by `isa`'s vector code.
// False when the path is not available on this build and CPU.
FA_API bool vector_exp2(Isa isa, const float* in, float* out, int n);

// out[i] = element i of `in` (of `dtype`) widened to fp32 as `isa`'s tile
// loops widen K and V (int8 at scale 1), or with `row_path` as its row path
// widens them in registers (decoding); n a multiple of 8.  False when the
// path is not available.
FA_API bool vector_widen(Isa isa, DType dtype, const void* in, float* out, int n, bool row_path = false);

// out[i] = FP8 code i of `in` widened to bf16 (then fp32) by `isa`'s row
// path through its byte tables, as it widens K (64 codes a step) or, with
// `value_pairs`, V (codes [0, 64) and [64, 128) of each 128 as two keys'
// rows, widened as key pairs); n a multiple of 128.  False when the path
// is not available or widens no FP8 that way.  With `dtype` int8 (not
// `value_pairs`): the codes as the tile unit widens an int8 cache's rows.
FA_API bool vector_widen_pairs(Isa isa, DType dtype, const void* in, float* out, int n, bool value_pairs);

// The FA2 tile loop's stages timed one by one on one kernel path (the
// bench/fa2_stages program): one thread, the data in cache.
struct StageConfig {
  DType dtype;
  int head_dim, tile_q, tile_kv;  // head_dim a multiple of 8; tiles powers of two from 16
  int tiles_per_item;             // K/V tiles in the work item timed whole
  double seconds;                 // time budget per measurement
};

struct Stage {
  const char* name;
  double ns;     // per K/V tile, one thread, data in cache
  double flops;  // matrix-product FLOPs of the stage (0 for the others)
  bool reference = false;  // a ceiling shown for comparison, not part of the tile
};

struct StageReport {
  Stage stages[8];
  int count;
  // Nanoseconds per work item beyond its tiles: Q load and transpose,
  // accumulator set-up, epilogue (normalize, transpose back, store).
  double item_overhead_ns;
  double peak_gflops_one_thread;
  const char* peak_unit;  // the probe behind the peak: "FMA", "AMX" or "VDPBF16PS"
};

// Fills `out` for `isa`'s FA2 loop, compiled with the library.  False when
// the path is not available, the library is not FA2's, or the dtype is FP8.
FA_API bool time_tile_stages(Isa isa, const StageConfig& cfg, StageReport* out);

}  // namespace fa::testing
