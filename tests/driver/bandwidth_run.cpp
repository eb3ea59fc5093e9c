#include "bandwidth_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "flash_attention/flash_attention.h"

namespace fa::cli {

BandwidthRun time_bandwidth(const std::function<void()>& call, int warmup, int runs, int threads, double moved, bool probe,
                            bool huge_pages) {
  BandwidthRun r;
  r.threads = threads;
  r.runs = runs;
  r.probed = probe;
  r.huge_pages = huge_pages;
  // At least 256 MiB, so the copy runs from memory as a large call does.
  r.probe_bytes = std::max<std::size_t>(static_cast<std::size_t>(moved), std::size_t{256} << 20);
  if (probe) r.copy_before = measure_copy_bandwidth_gbps(threads, r.probe_bytes, 0.2, huge_pages);
  for (int i = 0; i < warmup; ++i) call();
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    r.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (probe) r.copy_after = measure_copy_bandwidth_gbps(threads, r.probe_bytes, 0.2, huge_pages);
  std::sort(r.ms.begin(), r.ms.end());
  r.median_ms = median_of(r.ms);
  r.gbps = moved / (r.median_ms * 1e-3) / 1e9;
  r.copy_peak = std::max(r.copy_before, r.copy_after);
  return r;
}

void print_bandwidth(const BandwidthRun& r) {
  char line[512];
  std::snprintf(line, sizeof line, "Latency: %.4f ms (min %.4f, max %.4f over %d runs)\n", r.median_ms, r.ms.front(), r.ms.back(), r.runs);
  std::cout << line;
  if (r.probed) {
    std::snprintf(line, sizeof line,
                  "Bandwidth: %.2f GB/s (%.1f%% of the measured %.2f GB/s; streaming copy of %.0f MiB on %d threads%s, "
                  "probes before/after: %.2f/%.2f)\n",
                  r.gbps, 100.0 * r.gbps / r.copy_peak, r.copy_peak, static_cast<double>(r.probe_bytes) / (1 << 20), r.threads,
                  r.huge_pages ? " on huge pages" : "", r.copy_before, r.copy_after);
  } else {
    std::snprintf(line, sizeof line, "Bandwidth: %.2f GB/s\n", r.gbps);
  }
  std::cout << line;
}

void add_bandwidth_json(Json& j, const BandwidthRun& r, double moved) {
  j["threads"] = r.threads;
  j["latency_ms"] = r.median_ms;
  j["latency_min_ms"] = r.ms.front();
  j["latency_max_ms"] = r.ms.back();
  j["bytes_moved"] = moved;
  j["bandwidth_gbps"] = r.gbps;
  j["huge_pages"] = r.huge_pages;
  if (r.probed) {
    j["copy_bandwidth_gbps"] = r.copy_peak;
    j["copy_bandwidth_before_gbps"] = r.copy_before;
    j["copy_bandwidth_after_gbps"] = r.copy_after;
    j["bandwidth_percent"] = 100.0 * r.gbps / r.copy_peak;
  }
}

}  // namespace fa::cli
