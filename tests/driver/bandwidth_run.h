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
  int threads = 0, runs = 0;
};

// `call` (which throws on failure) `warmup` times, then `runs` times
// timed; `moved` the bytes one call reads and writes; the copy probe's
// buffers on huge pages with `huge_pages` (the tensors' own pages).
BandwidthRun time_bandwidth(const std::function<void()>& call, int warmup, int runs, int threads, double moved, bool probe,
                            bool huge_pages = false);

// "Latency: ..." and "Bandwidth: <GB/s> (<x>% of the measured <GB/s>; ...)".
void print_bandwidth(const BandwidthRun& r);

// latency_ms (min, max), bytes_moved, bandwidth_gbps, and with the probe
// copy_bandwidth_gbps (before, after) and bandwidth_percent.
void add_bandwidth_json(Json& j, const BandwidthRun& r, double moved);

}  // namespace fa::cli
