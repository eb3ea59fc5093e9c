// How the benchmark binaries report a timed run, written once for all of
// them (fa1/fa2/fa3_benchmark now, the other operators' benchmarks as they
// land): the guide's text lines and the JSON object scripts read.
//
// RunFigures holds what every timed run measures (latencies, FLOPs, memory,
// the unit's peak and the read bandwidth probed in the same run) and writes
// both forms of it; a benchmark adds its own lines and keys around them.
// JSON goes through nlohmann::json (keys in the order they are set),
// printed on one line with --json and written, indented, to --json-file
// (atomically: a failed run leaves no file).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fa::cli {

using Json = nlohmann::ordered_json;

// The median of ascending `sorted` (0 when empty).
double median_of(const std::vector<double>& sorted);

struct RunFigures {
  std::vector<double> sorted_ms;  // each timed run, ascending
  double flops = 0;               // of one run
  double peak_memory_mb = 0;
  int threads = 0;
  // The product unit's peak, probed before and after the runs (probed:
  // false with --no-probe; peak 0 when the unit has no probe).
  bool probed = false;
  std::string peak_unit;
  double peak_before_gflops = 0, peak_after_gflops = 0;
  // The streaming-read bandwidth over `probe_bytes`, probed likewise; the
  // bytes one run must move; whether that, not the FLOPs, bounds the run.
  double bytes_moved = 0;
  double bandwidth_before_gbps = 0, bandwidth_after_gbps = 0;
  std::size_t probe_bytes = 0;
  std::string bandwidth_source;  // "DRAM" or "cache-resident"

  double median_ms() const;
  double tflops() const;
  double peak_gflops() const;  // the higher probe: a neighbour can take a core during one
  double bandwidth_peak_gbps() const;
  double bandwidth_gbps() const;
  double utilization_percent() const;
  double bandwidth_percent() const;
  // Moving the bytes at the measured bandwidth takes longer than the FLOPs
  // at the measured peak.
  bool memory_bound() const;

  // Latency, Throughput, Peak Memory, Utilization and (memory-bound runs)
  // Bandwidth lines.
  void write_text(std::ostream& out) const;
  // latency_ms ... peak_memory_mb, and with probes peak_* ... memory_bound.
  void write_json(Json& j) const;
};

// `j` as text (one line, or indented): bytes that are not UTF-8 (a path, a
// config file's string) become U+FFFD rather than an exception.
std::string json_text(const Json& j, int indent = -1);

// `j` on one line on stdout when `to_stdout`, and into `json_file` when it
// is not empty.
void emit_json(const Json& j, bool to_stdout, const std::string& json_file);

}  // namespace fa::cli
