// glu_benchmark: times a gated linear unit (SwiGLU, GeGLU erf or tanh,
// ReGLU) on the library's threads, and reports the bandwidth against a
// streaming copy measured in the same run; --check compares with the
// float64 reference.  The flag style, output lines and --json follow
// fa2_benchmark's.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "driver/bandwidth_run.h"
#include "driver/cli_args.h"
#include "driver/elementwise_options.h"
#include "driver/host_tensor.h"
#include "driver/report.h"
#include "glu_case.h"

namespace {

using fa::cli::Args;
using fa::cli::FlagKind;
using fa::cli::Json;
using fa::cli::UsageError;

std::vector<fa::cli::FlagSpec> flags() {
  using K = FlagKind;
  return fa::cli::elementwise_benchmark_flags({
      {"op", K::kString, "swiglu|geglu|geglu-tanh|reglu", "the unit: SiLU, GELU (erf), GELU (tanh) or ReLU gate (default swiglu)"},
      {"rows", K::kInt, "N", "rows: tokens (default 1024)"},
      {"hidden", K::kInt, "N", "d, the output's width; the input row holds 2d (default 14336, Llama 3 8B's MLP)"},
      {"split", K::kString, "gate-first|up-first", "which half of the input row is the gate (default gate-first)"},
      {"dtype", K::kString, "bf16|fp16|fp32", "dtype of the input (default bf16)"},
      {"out-dtype", K::kString, "bf16|fp16|fp32", "dtype of the output (default: --dtype)"},
      {"stream", K::kString, "auto|on|off", "the output through non-temporal stores (default auto: when input and output exceed the last-level cache)"},
      {"activation", K::kString, "auto|table|computed", "fp16/bf16 gates on the AVX2 and AVX-512 paths: act(g) read from a table of every gate value, or computed (default auto: the faster of the two on this core, timed once)"},
  }, "the output", "write the output as [rows, hidden] in its dtype");
}

int run(int argc, char** argv) {
  Args args("glu_benchmark", flags());
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "Gated linear unit benchmark (SwiGLU, GeGLU, ReGLU)\n" << args.help_text();
    return 0;
  }
  fa::cli::GluCase c;
  const std::string op = args.str("op", "swiglu");
  const std::optional<fa::GluKind> kind = fa::cli::parse_glu_kind(op);
  if (!kind) throw UsageError("--op=" + op + " is not valid: expected swiglu, geglu, geglu-tanh or reglu");
  c.params.kind = *kind;
  const std::string split = args.str("split", "gate-first");
  if (split == "gate-first" || split == "up-first") {
    c.params.split = split == "gate-first" ? fa::GluSplit::kGateFirst : fa::GluSplit::kUpFirst;
  } else {
    throw UsageError("--split=" + split + " is not valid: expected gate-first or up-first");
  }
  c.rows = args.integer("rows", 1024, 1, std::int64_t{1} << 31);
  c.width = args.integer("hidden", 14336, 1, std::int64_t{1} << 30);
  c.dtype = fa::cli::parse_elementwise_dtype(args.str("dtype", "bf16"), "dtype");
  if (args.has("out-dtype")) c.out_dtype = fa::cli::parse_elementwise_dtype(args.str("out-dtype"), "out-dtype");
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

  const fa::DType out = c.out_dtype ? *c.out_dtype : c.dtype;
  const std::size_t outputs = fa::cli::checked_product({c.rows, c.width}, "--rows x --hidden");
  // x (2 elements an output), y, and with --check the reference's doubles.
  fa::cli::check_fits_in_memory(outputs * (2 * fa::dtype_size(c.dtype) + fa::dtype_size(out) + (args.flag("check") ? 8 : 0)),
                                "the input, output and reference");
  fa::GluParams params = fa::cli::glu_params(c);
  const std::string stream = args.str("stream", "auto");
  if (stream == "on" || stream == "off") {
    params.stream_output = stream == "on";
  } else if (stream != "auto") {
    throw UsageError("--stream=" + stream + " is not valid: expected auto, on or off");
  }
  const std::string activation = args.str("activation", "auto");
  if (activation != "auto" && activation != "table" && activation != "computed") {
    throw UsageError("--activation=" + activation + " is not valid: expected auto, table or computed");
  }
  if (activation != "auto") params.lookup_activation = activation == "table";
  fa::Isa isa;
  if (fa::Status s = fa::glu_isa(params, &isa); !s.ok()) throw UsageError(s.message());
  const bool table = fa::glu_uses_activation_table(params, c.dtype);
  c.with_reference = args.flag("check");
  fa::cli::set_huge_page_buffers(args.flag("huge-pages"));  // before the tensors are allocated
  fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
  if (fa::Status s = fa::validate_glu(params, b.tensors); !s.ok()) throw UsageError(s.message());

  const int threads = c.threads > 0 ? c.threads : fa::default_thread_count();
  const double moved = static_cast<double>(outputs) * static_cast<double>(2 * fa::dtype_size(c.dtype) + fa::dtype_size(out));
  const fa::cli::BandwidthRun timing = fa::cli::time_bandwidth(
      [&] {
        if (fa::Status s = fa::glu_forward(params, b.tensors); !s.ok()) throw UsageError(s.message());
      },
      warmup, runs, threads, moved, !args.flag("no-probe"), args.flag("huge-pages"), !args.flag("warm-cache"));

  std::cout << "Gated linear unit benchmark (glu)\nConfig: " << fa::cli::describe(c) << "\n";
  std::cout << "Kernel: " << fa::isa_name(isa) << "  Threads: " << threads << "  Activation: " << (table ? "table" : "computed") << "\n";
  fa::cli::print_bandwidth(timing);
  bool pass = true;
  Json j;
  j["operator"] = op;
  j["rows"] = c.rows;
  j["hidden"] = c.width;
  j["split"] = split;
  j["dtype"] = std::string(fa::dtype_name(c.dtype));
  j["out_dtype"] = std::string(fa::dtype_name(out));
  j["kernel"] = std::string(fa::isa_name(isa));
  j["activation"] = table ? "table" : "computed";
  fa::cli::add_bandwidth_json(j, timing, moved);
  if (args.flag("check")) {
    const fa::cli::GluCheck r = fa::cli::check_glu(c, b);
    pass = r.pass;
    char line[512];
    std::snprintf(line, sizeof line, "Check: max_abs=%.2e rel_l2=%.2e worst=%.2f of its allowance, %lld past it, nonfinite=%lld: %s\n",
                  r.max_abs_error, r.rel_l2_error, r.worst_share, static_cast<long long>(r.mismatches),
                  static_cast<long long>(r.nonfinite), pass ? "PASS" : "FAIL");
    std::cout << line;
    j["check"] = pass ? "PASS" : "FAIL";
    j["max_abs_error"] = r.max_abs_error;
    j["rel_l2_error"] = r.rel_l2_error;
  }
  if (!output.empty()) fa::cli::write_atomic(output, b.y.data(), outputs * fa::dtype_size(out), "output");
  fa::cli::emit_json(j, args.flag("json"), json_file);
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
