// --profile DIR: the benchmark's timed calls as a Chrome trace-event file
// (opens in Perfetto, ui.perfetto.dev, or chrome://tracing).
//
// Tracks: "calls" (one slice per call), one per worker thread (a slice per
// work item; inside it, its stages' totals back to back, from
// fa::CallProfile), and a memory counter (the benchmark's buffers and the
// call's workspace).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "flash_attention/flash_attention.h"
#include "report.h"

namespace fa::cli {

struct TraceInfo {
  std::string program;        // e.g. "fa2_benchmark"
  Json run;                   // the run's settings and results, put in the file's metadata
  std::size_t host_bytes = 0;  // the benchmark's own buffers (inputs, outputs)
};

Json chrome_trace(const std::vector<fa::CallProfile>& calls, const TraceInfo& info);

// Checks DIR can be made (its parent exists) before the run.
void check_profile_dir(const std::string& dir);
// Writes `trace` to DIR/<program>_trace.json (DIR created if needed,
// atomically); returns the path.
std::string write_trace(const std::string& dir, const std::string& program, const Json& trace);

}  // namespace fa::cli
