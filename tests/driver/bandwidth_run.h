// The timing of the memory-bound operators' benchmarks (the norms, RoPE,
// the gated linear units): warm-up calls, timed calls, and a streaming copy
// measured on the same threads before and after them; their `Latency` and
// `Bandwidth` lines and JSON fields, the same for each.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "report.h"

namespace fa::cli {

struct BandwidthRun {
  std::vector<double> ms;  // sorted
  double median_ms = 0, gbps = 0;
  bool probed = false;
  bool huge_pages = false;  // the copy's buffers on transparent huge pages (--huge-pages)
  double copy_before = 0, copy_after = 0, copy_peak = 0;
  std::size_t probe_bytes = 0;
  std::size_t evicted_bytes = 0;  // read before each timed call (0: the caches kept warm)
  int threads = 0, runs = 0;
};

// `call` (which throws on failure) `warmup` times, then `runs` times
// timed; `moved` the bytes one call reads and writes; the copy probe's
// buffers on huge pages with `huge_pages` (the tensors' own pages).  With
// `from_memory`, a call larger than the cache the operators count on
// keeping, whose bytes the last-level cache sysfs lists could still hold,
// is timed after a read of twice that cache (at most 1 GiB), so its inputs
// come from memory as a model's would, not from the previous run's cache
// (a 2-vCPU guest listing its host's 480 MiB L3 read 16M-element inputs
// largely from there: RMSNorm bf16 at 90-95% of the copy, 47-53% read from
// memory).
BandwidthRun time_bandwidth(const std::function<void()>& call, int warmup, int runs, int threads, double moved, bool probe,
                            bool huge_pages = false, bool from_memory = true);

// "Latency: ..." and "Bandwidth: <GB/s> (<x>% of the measured <GB/s>; ...)".
void print_bandwidth(const BandwidthRun& r);

// latency_ms (min, max), bytes_moved, bandwidth_gbps, and with the probe
// copy_bandwidth_gbps (before, after) and bandwidth_percent.
void add_bandwidth_json(Json& j, const BandwidthRun& r, double moved);

}  // namespace fa::cli
