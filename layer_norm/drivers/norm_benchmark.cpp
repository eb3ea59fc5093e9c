// layer_norm_benchmark: times LayerNorm or RMSNorm (optionally fused with
// the residual add) on the library's threads, and reports the bandwidth
// against a streaming copy measured in the same run; --check compares with
// the float64 reference.  The flag style, output lines and --json follow
// fa2_benchmark's.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "driver/bandwidth_run.h"
#include "driver/cli_args.h"
#include "driver/elementwise_options.h"
#include "driver/host_tensor.h"
#include "driver/report.h"
#include "norm_case.h"

namespace {

using fa::cli::Args;
using fa::cli::FlagKind;
using fa::cli::Json;
using fa::cli::UsageError;

std::vector<fa::cli::FlagSpec> flags() {
  using K = FlagKind;
  return fa::cli::elementwise_benchmark_flags({
      {"op", K::kString, "layernorm|rmsnorm", "the operator (default layernorm)"},
      {"rows", K::kInt, "N", "rows: tokens (default 4096)"},
      {"hidden", K::kInt, "N", "elements a row, the normalized dimension (default 4096)"},
      {"dtype", K::kString, "bf16|fp16|fp32", "dtype of x, the residual, the sum and y (default bf16)"},
      {"param-dtype", K::kString, "fp32|DTYPE", "dtype of gamma and beta: fp32 or --dtype (default fp32)"},
      {"eps", K::kFloat, "X", "added under the square root, > 0 (default 1e-5 layernorm, 1e-6 rmsnorm)"},
      {"residual", K::kBool, "", "fused: normalize x + residual and write the sum (the pre-norm block)"},
      {"compare-unfused", K::kBool, "", "with --residual: also time the two separate calls (residual_add, then the norm of the sum) and print the fused call's speedup"},
      {"no-gamma", K::kBool, "", "no scale"},
      {"no-beta", K::kBool, "", "no shift (layernorm; rmsnorm has none)"},
      {"stream", K::kString, "auto|on|off", "y through non-temporal stores (default auto: when x and y exceed the last-level cache)"},
  }, "y, mean and rstd", "write y as [rows, hidden] in --dtype");
}

int run(int argc, char** argv) {
  Args args("layer_norm_benchmark", flags());
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "LayerNorm / RMSNorm benchmark\n" << args.help_text();
    return 0;
  }
  fa::cli::NormCase c;
  const std::string op = args.str("op", "layernorm");
  if (op == "layernorm") {
    c.kind = fa::NormKind::kLayerNorm;
  } else if (op == "rmsnorm") {
    c.kind = fa::NormKind::kRmsNorm;
  } else {
    throw UsageError("--op=" + op + " is not valid: expected layernorm or rmsnorm");
  }
  c.rows = args.integer("rows", 4096, 1, std::int64_t{1} << 31);
  c.hidden = args.integer("hidden", 4096, 1, std::int64_t{1} << 24);
  c.dtype = fa::cli::parse_elementwise_dtype(args.str("dtype", "bf16"), "dtype");
  c.param_dtype = fa::cli::parse_elementwise_dtype(args.str("param-dtype", "fp32"), "param-dtype");
  if (c.param_dtype != fa::DType::kF32 && c.param_dtype != c.dtype) {
    throw UsageError("--param-dtype=" + args.str("param-dtype") + " is not valid: expected fp32 or --dtype's " +
                     std::string(fa::dtype_name(c.dtype)));
  }
  if (args.has("eps")) {
    const double eps = args.real("eps", 0.0);
    if (!(eps > 0.0) || eps > 1e30) throw UsageError("--eps=" + args.str("eps") + " is not valid: expected a number > 0");
    c.eps = static_cast<float>(eps);
  }
  c.residual = args.flag("residual");
  const bool compare_unfused = args.flag("compare-unfused");
  if (compare_unfused && !c.residual) throw UsageError("--compare-unfused is not valid without --residual: there is nothing to unfuse");
  c.gamma = !args.flag("no-gamma");
  c.beta = !args.flag("no-beta");
  if (c.kind == fa::NormKind::kRmsNorm && args.flag("no-beta")) {
    throw UsageError("--no-beta is not valid with --op=rmsnorm: RMSNorm has no shift");
  }
  c.threads = static_cast<int>(args.integer("threads", 0, 0, fa::kMaxThreads));
  if (args.has("isa")) {
    const std::optional<fa::Isa> isa = fa::parse_isa(args.str("isa"));
    if (!isa) throw UsageError("--isa=" + args.str("isa") + " is not valid: expected generic, avx2, avx512, avx512bf16 or amx");
    c.isa = isa;
  }
  c.seed = static_cast<std::uint64_t>(args.integer("seed", 1, 0, std::int64_t{1} << 62));
  const int runs = static_cast<int>(args.integer("num-runs", 20, 1, 1000000));
  const int warmup = static_cast<int>(args.integer("warmup-runs", 3, 0, 1000000));
  const std::string output = args.str("output"), json_file = args.str("json-file");
  if (!output.empty()) fa::cli::check_destination(output, "output");
  if (!json_file.empty()) fa::cli::check_destination(json_file, "json-file");

  const std::size_t es = fa::dtype_size(c.dtype);
  const std::size_t bytes_x = fa::cli::checked_product({c.rows, c.hidden, static_cast<std::int64_t>(es)}, "--rows x --hidden");
  fa::cli::check_fits_in_memory(bytes_x * (c.residual ? 4 : 2), "the inputs and outputs");
  fa::NormParams params = fa::cli::norm_params(c);
  const std::string stream = args.str("stream", "auto");
  if (stream == "on" || stream == "off") {
    params.stream_output = stream == "on";
  } else if (stream != "auto") {
    throw UsageError("--stream=" + stream + " is not valid: expected auto, on or off");
  }
  fa::Isa isa;
  if (fa::Status s = fa::norm_isa(params, &isa); !s.ok()) throw UsageError(s.message());
  fa::cli::set_huge_page_buffers(args.flag("huge-pages"));  // before the tensors are allocated
  fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
  if (fa::Status s = fa::validate_norm(params, b.tensors); !s.ok()) throw UsageError(s.message());

  const int threads = c.threads > 0 ? c.threads : fa::default_thread_count();
  // Bytes one call must move: x (and the residual) read, y (and the sum) written.
  const double moved = static_cast<double>(bytes_x) * (c.residual ? 4.0 : 2.0);
  const fa::cli::BandwidthRun timing = fa::cli::time_bandwidth(
      [&] {
        if (fa::Status s = fa::norm_forward(params, b.tensors); !s.ok()) throw UsageError(s.message());
      },
      warmup, runs, threads, moved, !args.flag("no-probe"), args.flag("huge-pages"), !args.flag("warm-cache"));

  // The same work as two calls: the add, then the norm of the sum (x read
  // and the sum written by the first, the sum read again by the second).
  fa::cli::BandwidthRun unfused;
  if (compare_unfused) {
    fa::NormTensors norm_only = b.tensors;
    norm_only.x = b.tensors.sum;
    norm_only.residual = {};
    norm_only.sum = {};
    unfused = fa::cli::time_bandwidth(
        [&] {
          if (fa::Status s = fa::residual_add(params, b.tensors); !s.ok()) throw UsageError(s.message());
          if (fa::Status s = fa::norm_forward(params, norm_only); !s.ok()) throw UsageError(s.message());
        },
        warmup, runs, threads, static_cast<double>(bytes_x) * 5.0, false, false, !args.flag("warm-cache"));
  }

  const char* title = c.kind == fa::NormKind::kLayerNorm ? "LayerNorm" : "RMSNorm";
  std::cout << title << " benchmark (layer_norm)\n";
  std::cout << "Config: op=" << op << " rows=" << c.rows << " hidden=" << c.hidden << " dtype=" << fa::dtype_name(c.dtype)
            << " eps=" << (c.eps ? *c.eps : (c.kind == fa::NormKind::kLayerNorm ? 1e-5f : 1e-6f))
            << " residual=" << (c.residual ? "fused" : "no") << " gamma=" << (c.gamma ? "yes" : "no");
  if (c.kind == fa::NormKind::kLayerNorm) std::cout << " beta=" << (c.beta ? "yes" : "no");
  if (c.gamma || (c.beta && c.kind == fa::NormKind::kLayerNorm)) std::cout << " param_dtype=" << fa::dtype_name(c.param_dtype);
  std::cout << "\nKernel: " << fa::isa_name(isa) << "  Threads: " << threads << "\n";
  fa::cli::print_bandwidth(timing);
  bool pass = true;
  Json j;
  j["operator"] = op;
  j["rows"] = c.rows;
  j["hidden"] = c.hidden;
  j["dtype"] = std::string(fa::dtype_name(c.dtype));
  j["residual"] = c.residual;
  j["kernel"] = std::string(fa::isa_name(isa));
  fa::cli::add_bandwidth_json(j, timing, moved);
  if (compare_unfused) {
    std::printf("Unfused: %.4f ms (residual_add then the norm: %.2f GB/s); the fused call is %.2fx faster\n", unfused.median_ms,
                unfused.gbps, unfused.median_ms / timing.median_ms);
    j["unfused_latency_ms"] = unfused.median_ms;
    j["fused_speedup"] = unfused.median_ms / timing.median_ms;
  }
  if (args.flag("check")) {
    char line[512];
    const fa::cli::NormCheck r = fa::cli::check_norm(c, b);
    pass = r.pass;
    std::snprintf(line, sizeof line, "Check: rel_l2=%.2e (bound %.0e) max_abs=%.2e stats=%.1e nonfinite=%lld: %s\n",
                  r.rel_l2_error, r.bound, r.max_abs_error, r.stat_error, static_cast<long long>(r.nonfinite),
                  pass ? "PASS" : "FAIL");
    std::cout << line;
    j["check"] = pass ? "PASS" : "FAIL";
    j["rel_l2_error"] = r.rel_l2_error;
  }
  if (!output.empty()) fa::cli::write_atomic(output, b.y.data(), bytes_x, "output");
  fa::cli::emit_json(j, args.flag("json"), json_file);
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
