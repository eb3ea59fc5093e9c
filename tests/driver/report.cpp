#include "report.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "host_tensor.h"

namespace fa::cli {

double median_of(const std::vector<double>& sorted) {
  if (sorted.empty()) return 0.0;
  const std::size_t n = sorted.size();
  return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double RunFigures::median_ms() const { return median_of(sorted_ms); }

double RunFigures::tflops() const {
  const double ms = median_ms();
  return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
}

double RunFigures::peak_gflops() const { return std::max(peak_before_gflops, peak_after_gflops); }

double RunFigures::bandwidth_peak_gbps() const { return std::max(bandwidth_before_gbps, bandwidth_after_gbps); }

double RunFigures::bandwidth_gbps() const {
  const double ms = median_ms();
  return ms > 0 ? bytes_moved / (ms * 1e-3) / 1e9 : 0.0;
}

double RunFigures::utilization_percent() const {
  return peak_gflops() > 0 ? 100.0 * tflops() * 1e3 / peak_gflops() : 0.0;
}

double RunFigures::bandwidth_percent() const {
  return bandwidth_peak_gbps() > 0 ? 100.0 * bandwidth_gbps() / bandwidth_peak_gbps() : 0.0;
}

bool RunFigures::memory_bound() const {
  const double bw = bandwidth_peak_gbps(), peak = peak_gflops();
  return bw > 0 && (peak <= 0 || bytes_moved / bw >= flops / peak);
}

void RunFigures::write_text(std::ostream& out) const {
  char line[512];
  std::snprintf(line, sizeof line, "Latency: %.4f ms (min %.4f, max %.4f over %zu runs)\n", median_ms(),
                sorted_ms.empty() ? 0.0 : sorted_ms.front(), sorted_ms.empty() ? 0.0 : sorted_ms.back(), sorted_ms.size());
  out << line;
  std::snprintf(line, sizeof line, "Throughput: %.5f TFLOPS\n", tflops());
  out << line;
  std::snprintf(line, sizeof line, "Peak Memory: %.2f MB\n", peak_memory_mb);
  out << line;
  if (!probed) return;
  if (peak_gflops() <= 0) {  // a unit without a probe (the emulated tiles of FA_AMX_EMULATION=ON)
    out << "Utilization: n/a (no " << peak_unit << " peak probe in this build)\n";
  } else {
    std::snprintf(line, sizeof line,
                  "Utilization: %.1f%% of %s peak (%.1f GFLOP/s on %d threads; probes before/after: %.1f/%.1f)\n",
                  utilization_percent(), peak_unit.c_str(), peak_gflops(), threads, peak_before_gflops, peak_after_gflops);
    out << line;
  }
  if (memory_bound()) {
    std::snprintf(line, sizeof line,
                  "Bandwidth: %.2f GB/s (%.1f%% of the measured %.2f GB/s; %s streaming read of %.0f MiB on %d threads, "
                  "probes before/after: %.2f/%.2f)\n",
                  bandwidth_gbps(), bandwidth_percent(), bandwidth_peak_gbps(), bandwidth_source.c_str(),
                  probe_bytes / 1048576.0, threads, bandwidth_before_gbps, bandwidth_after_gbps);
    out << line;
  }
}

void RunFigures::write_json(Json& j) const {
  j["latency_ms"] = median_ms();
  j["latency_min_ms"] = sorted_ms.empty() ? 0.0 : sorted_ms.front();
  j["latency_max_ms"] = sorted_ms.empty() ? 0.0 : sorted_ms.back();
  j["runs"] = sorted_ms.size();
  j["flops"] = flops;
  j["throughput_tflops"] = tflops();
  j["peak_memory_mb"] = peak_memory_mb;
  if (!probed) return;
  j["peak_gflops"] = peak_gflops();
  j["peak_before_gflops"] = peak_before_gflops;
  j["peak_after_gflops"] = peak_after_gflops;
  j["peak_unit"] = peak_unit;
  j["utilization_percent"] = utilization_percent();
  j["bytes_moved"] = bytes_moved;
  j["bandwidth_gbps"] = bandwidth_gbps();
  j["bandwidth_peak_gbps"] = bandwidth_peak_gbps();
  j["bandwidth_before_gbps"] = bandwidth_before_gbps;
  j["bandwidth_after_gbps"] = bandwidth_after_gbps;
  j["bandwidth_percent"] = bandwidth_percent();
  j["bandwidth_probe_bytes"] = probe_bytes;
  j["bandwidth_source"] = bandwidth_source;
  j["memory_bound"] = memory_bound();
}

std::string json_text(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

void emit_json(const Json& j, bool to_stdout, const std::string& json_file) {
  if (to_stdout) std::cout << json_text(j) << "\n" << std::flush;
  if (!json_file.empty()) {
    const std::string text = json_text(j, 2) + "\n";
    write_atomic(json_file, text.data(), text.size(), "json-file");
  }
}

}  // namespace fa::cli
