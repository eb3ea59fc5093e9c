#include "trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cli_args.h"
#include "host_tensor.h"

namespace fa::cli {

Json chrome_trace(const std::vector<fa::CallProfile>& calls, const TraceInfo& info) {
  Json events = Json::array();
  const int pid = 1;
  auto meta = [&](const char* what, int tid, const std::string& name) {
    Json e;
    e["name"] = what;
    e["ph"] = "M";
    e["pid"] = pid;
    if (tid >= 0) e["tid"] = tid;
    e["args"] = Json{{"name", name}};
    events.push_back(e);
  };
  meta("process_name", -1, info.program);
  meta("thread_name", 0, "calls");
  int threads = 0;
  for (const fa::CallProfile& c : calls) threads = std::max(threads, c.threads);
  for (int w = 0; w < threads; ++w) meta("thread_name", w + 1, "worker " + std::to_string(w));

  const double t0 = calls.empty() ? 0.0 : calls.front().start_us;
  auto slice = [&](const std::string& name, const char* cat, int tid, double ts, double dur, Json args) {
    Json e;
    e["name"] = name;
    e["cat"] = cat;
    e["ph"] = "X";
    e["pid"] = pid;
    e["tid"] = tid;
    e["ts"] = ts;
    e["dur"] = dur;
    if (!args.is_null()) e["args"] = std::move(args);
    events.push_back(std::move(e));
  };
  auto memory = [&](double ts, std::size_t workspace) {
    Json e;
    e["name"] = "memory (MB)";
    e["ph"] = "C";
    e["pid"] = pid;
    e["ts"] = ts;
    e["args"] = Json{{"buffers", double(info.host_bytes) / 1048576.0}, {"workspace", double(workspace) / 1048576.0}};
    events.push_back(std::move(e));
  };
  for (std::size_t c = 0; c < calls.size(); ++c) {
    const fa::CallProfile& call = calls[c];
    const double base = call.start_us - t0;
    memory(base, call.workspace_bytes);
    slice("call " + std::to_string(c), "call", 0, base, call.duration_us,
          Json{{"kernel", call.kernel}, {"threads", call.threads}, {"work_items", call.items.size()}});
    for (std::size_t i = 0; i < call.items.size(); ++i) {
      const fa::ItemProfile& item = call.items[i];
      double lapped = 0;
      for (double s : item.stage_us) lapped += s;
      Json args{{"item", i}};
      if (lapped == 0) args["note"] = "row path (short Q tile): not lapped";
      slice("item " + std::to_string(i), "item", item.thread + 1, base + item.start_us, item.end_us - item.start_us,
            std::move(args));
      // The stages' totals, back to back inside the item (they alternate
      // step by step in the loop; the trace shows how much each took).
      double ts = base + item.start_us;
      for (int s = 0; s < fa::kProfileStages; ++s) {
        if (item.stage_us[s] <= 0) continue;
        slice(fa::kProfileStageNames[s], "stage", item.thread + 1, ts, item.stage_us[s],
              Json{{"summed_over_kv_steps", true}});
        ts += item.stage_us[s];
      }
    }
    memory(base + call.duration_us, call.workspace_bytes);
  }
  Json trace;
  trace["traceEvents"] = std::move(events);
  trace["displayTimeUnit"] = "ms";
  trace["otherData"] = info.run;
  return trace;
}

void check_profile_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw UsageError("--profile: '" + dir + "' exists and is not a directory");
    return;
  }
  check_destination(dir, "profile");  // its parent must exist and be writable
}

std::string write_trace(const std::string& dir, const std::string& program, const Json& trace) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    throw UsageError("--profile: cannot create '" + dir + "': " + std::strerror(errno));
  }
  const std::string path = dir + "/" + program + "_trace.json";
  const std::string text = json_text(trace) + "\n";
  write_atomic(path, text.data(), text.size(), "profile");
  return path;
}

}  // namespace fa::cli
