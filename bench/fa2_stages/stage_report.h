// Plain data between the per-ISA stage timers and the fa2_stages driver.
#pragma once

#include "flash_attention/flash_attention.h"

namespace fa::bench {

struct StageConfig {
  DType dtype;
  int head_dim, tile_q, tile_kv;
  int tiles_per_item;  // K/V tiles in the work item timed whole
  double seconds;      // time budget per measurement
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

}  // namespace fa::bench
