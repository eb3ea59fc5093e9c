// decoder_layer_benchmark: times one Llama-style decoder layer (the
// library's RMSNorm, RoPE, FlashAttention-2 and SwiGLU; oneDNN's matmul for
// the projections) stage by stage, prints the median of each in a table
// with a bar chart of the shares, and with --check compares the output with
// the composition of the float64 references.  Flags and --json follow
// fa2_benchmark's.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "decoder_layer/decoder_layer.h"
#include "driver/cli_args.h"
#include "driver/host_tensor.h"
#include "driver/report.h"

namespace {

using fa::cli::Args;
using fa::cli::FlagKind;
using fa::cli::Json;
using fa::cli::UsageError;

int run(int argc, char** argv) {
  using K = FlagKind;
  Args args("decoder_layer_benchmark",
            {{"seq-len", K::kInt, "N", "tokens of the prefill (default 512)"},
             {"hidden", K::kInt, "N", "model width (default 2048)"},
             {"num-heads", K::kInt, "N", "query heads (default 32)"},
             {"num-kv-heads", K::kInt, "N", "key/value heads, divides --num-heads (default 4)"},
             {"head-dim", K::kInt, "N", "head dimension (default 64)"},
             {"intermediate", K::kInt, "N", "MLP width (default 5632; the defaults are TinyLlama 1.1B's layer)"},
             {"dtype", K::kString, "bf16|fp32", "activations and weights (default bf16)"},
             {"threads", K::kInt, "N", "threads of the library's operators (default: all cores; oneDNN follows OMP_NUM_THREADS)"},
             {"num-runs", K::kInt, "N", "timed runs; each stage's median is reported (default 5)"},
             {"warmup-runs", K::kInt, "N", "untimed runs first (default 1)"},
             {"seed", K::kInt, "N", "seed of the random weights and input (default 1)"},
             {"check", K::kBool, "", "compare the output with the float64 references (PASS/FAIL; exit 1 on FAIL)"},
             {"json", K::kBool, "", "print the results as one JSON object on the last line"},
             {"json-file", K::kString, "PATH", "write the JSON object to PATH"},
             {"help", K::kBool, "", "print this help"}});
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "Decoder layer benchmark (RMSNorm, RoPE, FlashAttention-2, SwiGLU; oneDNN projections)\n" << args.help_text();
    return 0;
  }
  fa::example::DecoderConfig c;
  c.tokens = args.integer("seq-len", 512, 1, 1 << 20);
  c.hidden = args.integer("hidden", 2048, 1, 1 << 20);
  c.heads = args.integer("num-heads", 32, 1, 4096);
  c.kv_heads = args.integer("num-kv-heads", 4, 1, 4096);
  c.head_dim = args.integer("head-dim", 64, 8, 256);
  c.intermediate = args.integer("intermediate", 5632, 1, 1 << 20);
  if (c.heads % c.kv_heads != 0) {
    throw UsageError("--num-kv-heads=" + std::to_string(c.kv_heads) + " is not valid: expected a divisor of --num-heads " + std::to_string(c.heads));
  }
  const std::string dtype = args.str("dtype", "bf16");
  if (dtype != "bf16" && dtype != "fp32") throw UsageError("--dtype=" + dtype + " is not valid: expected bf16 or fp32");
  c.dtype = dtype == "bf16" ? fa::DType::kBF16 : fa::DType::kF32;
  c.threads = static_cast<int>(args.integer("threads", 0, 0, fa::kMaxThreads));
  c.seed = static_cast<std::uint64_t>(args.integer("seed", 1, 0, std::int64_t{1} << 62));
  const int runs = static_cast<int>(args.integer("num-runs", 5, 1, 100000));
  const int warmup = static_cast<int>(args.integer("warmup-runs", 1, 0, 100000));
  const std::string json_file = args.str("json-file");
  if (!json_file.empty()) fa::cli::check_destination(json_file, "json-file");

  fa::example::quiet_openmp_waits();
  std::unique_ptr<fa::example::DecoderLayer> layer;
  if (fa::Status s = fa::example::DecoderLayer::create(c, &layer); !s.ok()) throw UsageError(s.message());
  for (int i = 0; i < warmup; ++i) {
    if (fa::Status s = layer->run(nullptr); !s.ok()) throw UsageError(s.message());
  }
  std::array<std::vector<double>, fa::example::kDecoderStages> laps;
  std::vector<double> totals;
  for (int i = 0; i < runs; ++i) {
    std::array<double, fa::example::kDecoderStages> ms{};
    if (fa::Status s = layer->run(&ms); !s.ok()) throw UsageError(s.message());
    double total = 0;
    for (std::size_t k = 0; k < ms.size(); ++k) {
      laps[k].push_back(ms[k]);
      total += ms[k];
    }
    totals.push_back(total);
  }
  std::sort(totals.begin(), totals.end());
  const double total_ms = fa::cli::median_of(totals);
  const std::array<double, fa::example::kDecoderStages> flops = fa::example::stage_flops(c);
  double total_flops = 0;
  for (double f : flops) total_flops += f;

  std::printf("Decoder layer benchmark (%s): seq_len=%lld hidden=%lld heads=%lld/%lld head_dim=%lld intermediate=%lld threads=%s\n",
              dtype.c_str(), static_cast<long long>(c.tokens), static_cast<long long>(c.hidden), static_cast<long long>(c.heads),
              static_cast<long long>(c.kv_heads), static_cast<long long>(c.head_dim), static_cast<long long>(c.intermediate),
              c.threads ? std::to_string(c.threads).c_str() : "all");
  std::printf("%-28s %10s %7s %10s  %s\n", "stage", "ms", "share", "GFLOP/s", "share of the layer's time");
  Json stages = Json::array();
  for (std::size_t k = 0; k < laps.size(); ++k) {
    std::sort(laps[k].begin(), laps[k].end());
    const double ms = fa::cli::median_of(laps[k]);
    const double share = total_ms > 0 ? ms / total_ms : 0;
    const std::string bar(static_cast<std::size_t>(share * 50 + 0.5), '#');
    char gflops[32] = "-";
    if (flops[k] > 0) std::snprintf(gflops, sizeof gflops, "%.1f", flops[k] / (ms * 1e-3) / 1e9);
    std::printf("%-28s %10.3f %6.1f%% %10s  %s\n", fa::example::kStageNames[k], ms, 100 * share, gflops, bar.c_str());
    Json s;
    s["stage"] = fa::example::kStageNames[k];
    s["latency_ms"] = ms;
    s["flops"] = flops[k];
    stages.push_back(s);
  }
  std::printf("Latency: %.3f ms (median of %d runs' totals)\n", total_ms, runs);
  std::printf("Throughput: %.3f TFLOPS (the projections and attention's products)\n", total_flops / (total_ms * 1e-3) / 1e12);
  Json j;
  j["operator"] = "decoder_layer";
  j["dtype"] = dtype;
  j["seq_len"] = c.tokens;
  j["hidden"] = c.hidden;
  j["num_heads"] = c.heads;
  j["num_kv_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate"] = c.intermediate;
  j["latency_ms"] = total_ms;
  j["throughput_tflops"] = total_flops / (total_ms * 1e-3) / 1e12;
  j["stages"] = stages;
  bool pass = true;
  if (args.flag("check")) {
    const fa::example::DecoderCheck r = fa::example::check_decoder(*layer);
    pass = r.pass;
    std::printf("Check: error %.2e of what the layer adds (bound %.1e), max_abs %.2e, nonfinite %lld: %s\n", r.rel_error, r.bound,
                r.max_abs_error, static_cast<long long>(r.nonfinite), pass ? "PASS" : "FAIL");
    j["check"] = pass ? "PASS" : "FAIL";
    j["rel_error"] = r.rel_error;
  }
  fa::cli::emit_json(j, args.flag("json"), json_file);
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
