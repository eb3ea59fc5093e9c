#include "bandwidth_run.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "flash_attention/flash_attention.h"
#include "host_tensor.h"

namespace fa::cli {
namespace {

// Reads `buffer` on `threads` threads, so the last-level cache holds its
// lines and none of the timed call's.
void read_through(const HostBuffer& buffer, int threads) {
  const std::size_t words = buffer.bytes() / sizeof(std::uint64_t);
  std::vector<std::thread> workers;
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads), 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const auto* w = static_cast<const std::uint64_t*>(buffer.data());
      std::uint64_t sum = 0;
      for (std::size_t i = words * t / threads; i < words * (t + 1) / threads; i += 8) sum += w[i];  // a word a line
      sums[static_cast<std::size_t>(t)] = sum;
    });
  }
  for (std::thread& w : workers) w.join();
  volatile std::uint64_t sink = 0;
  for (std::uint64_t s : sums) sink = sink + s;
}

}  // namespace

BandwidthRun time_bandwidth(const std::function<void()>& call, int warmup, int runs, int threads, double moved, bool probe,
                            bool huge_pages, bool from_memory) {
  BandwidthRun r;
  r.threads = threads;
  r.runs = runs;
  r.probed = probe;
  r.huge_pages = huge_pages;
  // At least 256 MiB, so the copy runs from memory as a large call does.
  r.probe_bytes = std::max<std::size_t>(static_cast<std::size_t>(moved), std::size_t{256} << 20);
  if (probe) r.copy_before = measure_copy_bandwidth_gbps(threads, r.probe_bytes, 0.2, huge_pages);
  // A call larger than the cache the operators count on keeping (their
  // streaming threshold, at most 8 MiB a core) would come from memory in a
  // model; a smaller one would not, and stays warm.  The read covers the
  // whole cache sysfs lists.
  const std::size_t llc = cpu_last_level_cache_bytes();
  HostBuffer evict;
  if (from_memory && llc > 0 && moved > static_cast<double>(cpu_cache_share_bytes()) &&
      moved < 2.0 * static_cast<double>(llc)) {
    r.evicted_bytes = std::min<std::size_t>(2 * llc, std::size_t{1} << 30);
    evict = HostBuffer(r.evicted_bytes);
    std::memset(evict.data(), 1, evict.bytes());
  }
  for (int i = 0; i < warmup; ++i) call();
  for (int i = 0; i < runs; ++i) {
    if (r.evicted_bytes) read_through(evict, threads);
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
  std::snprintf(line, sizeof line, "Latency: %.4f ms (min %.4f, max %.4f over %d runs%s)\n", r.median_ms, r.ms.front(), r.ms.back(), r.runs,
                r.evicted_bytes ? ", each after the last-level cache was read over" : "");
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
  j["caches_evicted"] = r.evicted_bytes > 0;
  if (r.probed) {
    j["copy_bandwidth_gbps"] = r.copy_peak;
    j["copy_bandwidth_before_gbps"] = r.copy_before;
    j["copy_bandwidth_after_gbps"] = r.copy_after;
    j["bandwidth_percent"] = 100.0 * r.gbps / r.copy_peak;
  }
}

}  // namespace fa::cli
