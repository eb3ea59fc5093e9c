// rope_benchmark: times rotary position embedding on Q and K on the
// library's threads, and reports the bandwidth against a streaming copy
// measured in the same run; --check compares with the float64 reference.
// The flag style, output lines and --json follow fa2_benchmark's.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "driver/bandwidth_run.h"
#include "driver/cli_args.h"
#include "driver/elementwise_options.h"
#include "driver/host_tensor.h"
#include "driver/report.h"
#include "rope_case.h"

namespace {

using fa::cli::Args;
using fa::cli::FlagKind;
using fa::cli::Json;
using fa::cli::UsageError;

std::vector<fa::cli::FlagSpec> flags() {
  using K = FlagKind;
  return fa::cli::elementwise_benchmark_flags({
      {"batch-size", K::kInt, "N", "batch size (default 1)"},
      {"seq-len", K::kInt, "N", "tokens a sequence (default 4096)"},
      {"num-heads", K::kInt, "N", "query heads (default 32)"},
      {"num-kv-heads", K::kInt, "N", "key heads (default 8)"},
      {"head-dim", K::kInt, "N", "head dimension, even (default 128)"},
      {"rotary-dim", K::kInt, "N", "rotated dimensions a head, even, <= --head-dim (default: --head-dim)"},
      {"dtype", K::kString, "bf16|fp16|fp32", "dtype of Q and K (default bf16)"},
      {"out-dtype", K::kString, "bf16|fp16|fp32", "write separate outputs in this dtype (default: rotate in place)"},
      {"layout", K::kString, "BSH|BSND|BNSD|TND", "memory layout of Q and K (default BSH; TND needs --cu-seqlens)"},
      {"cu-seqlens", K::kString, "0,N1,N2,...", "TND: cumulative sequence lengths (sets --batch-size and --seq-len)"},
      {"mode", K::kString, "rotate-half|interleaved", "pairs (i, i + rotary/2) as GPT-NeoX and Llama, or (2i, 2i + 1) as GPT-J (default rotate-half)"},
      {"base", K::kFloat, "X", "frequency base, > 0 (default 10000; Llama 3: 500000)"},
      {"scaling", K::kString, "none|linear|ntk|llama3", "frequency scaling for long contexts (default none)"},
      {"factor", K::kFloat, "X", "the scaling's factor, >= 1 (default 8 for llama3, else 1)"},
      {"low-freq-factor", K::kFloat, "X", "llama3 (default 1)"},
      {"high-freq-factor", K::kFloat, "X", "llama3 (default 4)"},
      {"original-max-position", K::kFloat, "N", "llama3: the trained context (default 8192)"},
      {"position-offset", K::kInt, "N", "token s at position N + s through a positions array (a KV-cache step; default: positions 0, 1, ...)"},
      {"tables", K::kBool, "", "pass precomputed cos/sin tables instead of computing the angles"},
  }, "Q and K", "write the rotated Q then K, each in --layout and the output dtype");
}

double positive(const Args& args, const char* flag, double fallback, double min_value, const char* expected) {
  const double v = args.real(flag, fallback);
  if (!(v >= min_value) || v > 1e30 || (min_value == 0.0 && v == 0.0)) {
    throw UsageError(std::string("--") + flag + "=" + args.str(flag) + " is not valid: expected " + expected);
  }
  return v;
}

fa::cli::RopeCase read_case(const Args& args) {
  constexpr std::int64_t kBig = std::int64_t{1} << 31;
  fa::cli::RopeCase c;
  const std::optional<fa::Layout> layout = fa::parse_layout(args.str("layout", "BSH"));
  if (!layout) throw UsageError("--layout=" + args.str("layout") + " is not valid: expected BSH, BSND, BNSD or TND");
  c.layout = *layout;
  if (c.layout == fa::Layout::kTND || args.has("cu-seqlens")) {
    if (c.layout != fa::Layout::kTND || !args.has("cu-seqlens")) throw UsageError("--layout=TND and --cu-seqlens go together");
    for (const char* flag : {"batch-size", "seq-len"}) {
      if (args.has(flag)) throw UsageError(std::string("--") + flag + ": set by --cu-seqlens with --layout=TND (give one)");
    }
    c.cu_seqlens = fa::cli::parse_count_list(args.str("cu-seqlens"), "cu-seqlens",
                                             "a non-decreasing list of token counts starting at 0 (e.g. 0,100,250)",
                                             [](long v, const std::vector<std::int32_t>& before) {
                                               return before.empty() ? v == 0 : v >= before.back();
                                             });
    if (c.cu_seqlens.size() < 2 || c.cu_seqlens.back() == 0) throw UsageError("--cu-seqlens: at least one sequence and a positive total");
    c.batch = 1;
    c.seq = c.cu_seqlens.back();
  } else {
    c.batch = args.integer("batch-size", 1, 1, kBig);
    c.seq = args.integer("seq-len", 4096, 1, kBig);
  }
  c.heads = args.integer("num-heads", 32, 1, 65536);
  c.kv_heads = args.integer("num-kv-heads", 8, 1, 65536);
  c.head_dim = args.integer("head-dim", 128, 2, 65536);
  if (c.head_dim % 2 != 0) throw UsageError("--head-dim=" + args.str("head-dim") + " is not valid: expected an even number");
  c.params.rotary_dim = args.integer("rotary-dim", c.head_dim, 2, c.head_dim);
  if (c.params.rotary_dim % 2 != 0) throw UsageError("--rotary-dim=" + args.str("rotary-dim") + " is not valid: expected an even number");
  c.dtype = fa::cli::parse_elementwise_dtype(args.str("dtype", "bf16"), "dtype");
  if (args.has("out-dtype")) c.out_dtype = fa::cli::parse_elementwise_dtype(args.str("out-dtype"), "out-dtype");
  const std::string mode = args.str("mode", "rotate-half");
  if (mode == "rotate-half") {
    c.params.mode = fa::RopeMode::kRotateHalf;
  } else if (mode == "interleaved") {
    c.params.mode = fa::RopeMode::kInterleaved;
  } else {
    throw UsageError("--mode=" + mode + " is not valid: expected rotate-half or interleaved");
  }
  c.params.base = positive(args, "base", 10000.0, 0.0, "a number > 0");
  const std::string scaling = args.str("scaling", "none");
  if (scaling == "none") {
    c.params.scaling = fa::RopeScaling::kNone;
  } else if (scaling == "linear") {
    c.params.scaling = fa::RopeScaling::kLinear;
  } else if (scaling == "ntk") {
    c.params.scaling = fa::RopeScaling::kNtk;
  } else if (scaling == "llama3") {
    c.params.scaling = fa::RopeScaling::kLlama3;
  } else {
    throw UsageError("--scaling=" + scaling + " is not valid: expected none, linear, ntk or llama3");
  }
  const bool llama3 = c.params.scaling == fa::RopeScaling::kLlama3;
  for (const char* flag : {"low-freq-factor", "high-freq-factor", "original-max-position"}) {
    if (args.has(flag) && !llama3) throw UsageError(std::string("--") + flag + " is not valid without --scaling=llama3");
  }
  if (args.has("factor") && c.params.scaling == fa::RopeScaling::kNone) throw UsageError("--factor is not valid without --scaling");
  c.params.factor = positive(args, "factor", llama3 ? 8.0 : 1.0, 1.0, "a number >= 1");
  c.params.low_freq_factor = positive(args, "low-freq-factor", 1.0, 0.0, "a number > 0");
  c.params.high_freq_factor = positive(args, "high-freq-factor", 4.0, 0.0, "a number > 0");
  if (!(c.params.high_freq_factor > c.params.low_freq_factor)) {
    throw UsageError("--high-freq-factor=" + std::to_string(c.params.high_freq_factor) + " is not valid: expected > --low-freq-factor");
  }
  c.params.original_max_position = positive(args, "original-max-position", 8192.0, 0.0, "a number > 0");
  if (args.has("position-offset")) c.position_offset = args.integer("position-offset", 0, 0, std::int64_t{1} << 24);
  c.tables = args.flag("tables");
  c.threads = static_cast<int>(args.integer("threads", 0, 0, fa::kMaxThreads));
  if (args.has("isa")) {
    const std::optional<fa::Isa> isa = fa::parse_isa(args.str("isa"));
    if (!isa) throw UsageError("--isa=" + args.str("isa") + " is not valid: expected generic, avx2, avx512, avx512bf16 or amx");
    c.isa = isa;
  }
  c.seed = static_cast<std::uint64_t>(args.integer("seed", 1, 0, std::int64_t{1} << 62));
  return c;
}

int run(int argc, char** argv) {
  Args args("rope_benchmark", flags());
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "RoPE benchmark (rotary position embedding on Q and K)\n" << args.help_text();
    return 0;
  }
  fa::cli::RopeCase c = read_case(args);
  const int runs = static_cast<int>(args.integer("num-runs", 20, 1, 1000000));
  const int warmup = static_cast<int>(args.integer("warmup-runs", 3, 0, 1000000));
  const std::string output = args.str("output"), json_file = args.str("json-file");
  if (!output.empty()) fa::cli::check_destination(output, "output");
  if (!json_file.empty()) fa::cli::check_destination(json_file, "json-file");
  const std::size_t es = fa::dtype_size(c.dtype);
  const std::size_t elems = fa::cli::checked_product({c.batch, c.seq, c.heads + c.kv_heads, c.head_dim}, "the Q and K shapes");
  const std::size_t out_es = c.out_dtype ? fa::dtype_size(*c.out_dtype) : 0;
  // The inputs, outputs and with --check the reference's doubles.
  fa::cli::check_fits_in_memory(elems * (es + out_es + (args.flag("check") ? 8 : 0)), "the inputs, outputs and reference");
  const fa::RopeParams params = fa::cli::rope_params(c);
  fa::Isa isa;
  if (fa::Status s = fa::rope_isa(params, &isa); !s.ok()) throw UsageError(s.message());
  const bool check = args.flag("check");
  c.with_reference = check;
  fa::cli::set_huge_page_buffers(args.flag("huge-pages"));  // before the tensors are allocated
  fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
  if (fa::Status s = fa::validate_rope(params, b.tensors); !s.ok()) throw UsageError(s.message());
  // The check reads the first call's result: in place, later calls rotate
  // the tensors again, so it is taken before the timing.
  bool pass = true;
  fa::cli::RopeCheck r;
  if (fa::Status s = fa::rope_forward(params, b.tensors); !s.ok()) throw UsageError(s.message());
  if (check) {
    r = fa::cli::check_rope(c, b);
    pass = r.pass;
  }
  if (!output.empty()) {
    // Q then K as the first call left them, in the output's dtype.
    const fa::TensorView& q = c.out_dtype ? b.tensors.q_out : b.tensors.q;
    const fa::TensorView& k = c.out_dtype ? b.tensors.k_out : b.tensors.k;
    const std::size_t qb = static_cast<std::size_t>(c.batch * c.seq * c.heads * c.head_dim) * fa::dtype_size(q.dtype);
    const std::size_t kb = static_cast<std::size_t>(c.batch * c.seq * c.kv_heads * c.head_dim) * fa::dtype_size(k.dtype);
    fa::cli::HostBuffer both(qb + kb);
    std::copy_n(static_cast<const char*>(q.data), qb, static_cast<char*>(both.data()));
    std::copy_n(static_cast<const char*>(k.data), kb, static_cast<char*>(both.data()) + qb);
    fa::cli::write_atomic(output, both.data(), qb + kb, "output");
  }

  const int threads = c.threads > 0 ? c.threads : fa::default_thread_count();
  const double moved = fa::cli::rope_bytes_moved(c);
  const fa::cli::BandwidthRun timing = fa::cli::time_bandwidth(
      [&] {
        if (fa::Status s = fa::rope_forward(params, b.tensors); !s.ok()) throw UsageError(s.message());
      },
      warmup, runs, threads, moved, !args.flag("no-probe"), args.flag("huge-pages"), !args.flag("warm-cache"));

  std::cout << "RoPE benchmark (rope)\n" << "Config: " << fa::cli::describe(c) << " base=" << c.params.base << "\n";
  std::cout << "Kernel: " << fa::isa_name(isa) << "  Threads: " << threads << "\n";
  fa::cli::print_bandwidth(timing);
  Json j;
  j["operator"] = "rope";
  j["mode"] = c.params.mode == fa::RopeMode::kRotateHalf ? "rotate-half" : "interleaved";
  j["batch_size"] = c.batch;
  j["seq_len"] = c.seq;
  j["num_heads"] = c.heads;
  j["num_kv_heads"] = c.kv_heads;
  j["head_dim"] = c.head_dim;
  j["rotary_dim"] = c.params.rotary_dim;
  j["layout"] = std::string(fa::layout_name(c.layout));
  j["dtype"] = std::string(fa::dtype_name(c.dtype));
  j["in_place"] = !c.out_dtype;
  j["kernel"] = std::string(fa::isa_name(isa));
  fa::cli::add_bandwidth_json(j, timing, moved);
  if (check) {
    char line[512];
    std::snprintf(line, sizeof line, "Check: max_abs=%.2e rel_l2=%.2e worst=%.2f of its allowance, %lld past it, nonfinite=%lld: %s\n",
                  r.max_abs_error, r.rel_l2_error, r.worst_share, static_cast<long long>(r.mismatches),
                  static_cast<long long>(r.nonfinite), pass ? "PASS" : "FAIL");
    std::cout << line;
    j["check"] = pass ? "PASS" : "FAIL";
    j["max_abs_error"] = r.max_abs_error;
    j["rel_l2_error"] = r.rel_l2_error;
  }
  fa::cli::emit_json(j, args.flag("json"), json_file);
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
