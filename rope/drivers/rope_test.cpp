// rope_test: RoPE against the float64 reference on a matrix of cases (both
// modes, fp32 / fp16 / bf16, in place and out of place into another dtype,
// every layout including TND, GQA head counts, partial rotary dimensions,
// odd head dimensions, KV-cache and random positions, every scaling,
// precomputed tables, every kernel path this CPU runs), one PASS/FAIL line
// each, as fa2_test prints.
#include <iostream>
#include <string>
#include <vector>

#include "driver/cli_args.h"
#include "driver/elementwise_options.h"
#include "rope_case.h"

namespace {

int run(int argc, char** argv) {
  const fa::cli::ElementwiseTestOptions o = fa::cli::read_elementwise_test_options(
      "rope_test", "RoPE correctness tests against the float64 reference", argc, argv, [](fa::Isa isa) {
        fa::RopeParams p;
        p.isa = isa;
        fa::Isa chosen;
        return fa::rope_isa(p, &chosen).ok();
      });
  if (o.help) return 0;
  const std::vector<fa::DType>& dtypes = o.dtypes;
  const std::vector<fa::Isa>& isas = o.isas;
  const std::uint64_t seed = o.seed;
  const bool quick = o.quick;
  // The variants, each on a shape of its own: together they cover every
  // option at least once per path, dtype and mode.
  struct Variant {
    const char* name;
    void (*apply)(fa::cli::RopeCase&);
  };
  const std::vector<Variant> variants = {
      {"plain", [](fa::cli::RopeCase& c) { c.batch = 2, c.seq = 37, c.heads = 4, c.kv_heads = 2, c.head_dim = 64; }},
      {"bnsd out-of-place", [](fa::cli::RopeCase& c) {
         c.layout = fa::Layout::kBNSD, c.batch = 1, c.seq = 19, c.heads = 3, c.kv_heads = 3, c.head_dim = 128;
         c.out_dtype = fa::DType::kF32;
       }},
      {"partial rotary, odd head_dim", [](fa::cli::RopeCase& c) {
         c.layout = fa::Layout::kBSND, c.batch = 1, c.seq = 9, c.heads = 2, c.kv_heads = 1, c.head_dim = 80, c.params.rotary_dim = 20;
         c.out_dtype = fa::DType::kBF16;
       }},
      {"tiny head", [](fa::cli::RopeCase& c) { c.seq = 5, c.heads = 1, c.kv_heads = 1, c.head_dim = 2; }},
      {"kv-cache step", [](fa::cli::RopeCase& c) {
         c.batch = 3, c.seq = 1, c.heads = 8, c.kv_heads = 2, c.head_dim = 128, c.position_offset = 131071;
         c.params.base = 500000, c.params.scaling = fa::RopeScaling::kLlama3, c.params.factor = 8;
       }},
      {"random positions", [](fa::cli::RopeCase& c) {
         c.seq = 33, c.heads = 2, c.kv_heads = 2, c.head_dim = 96, c.random_positions = true;
       }},
      {"linear", [](fa::cli::RopeCase& c) { c.seq = 64, c.heads = 2, c.kv_heads = 1, c.head_dim = 64, c.params.scaling = fa::RopeScaling::kLinear, c.params.factor = 4; }},
      {"ntk", [](fa::cli::RopeCase& c) { c.seq = 64, c.heads = 2, c.kv_heads = 1, c.head_dim = 64, c.params.scaling = fa::RopeScaling::kNtk, c.params.factor = 2; }},
      {"tables", [](fa::cli::RopeCase& c) { c.seq = 40, c.heads = 2, c.kv_heads = 2, c.head_dim = 48, c.tables = true, c.position_offset = 7; }},
      {"tnd", [](fa::cli::RopeCase& c) {
         c.layout = fa::Layout::kTND, c.cu_seqlens = {0, 5, 5, 22, 23}, c.seq = 23, c.heads = 4, c.kv_heads = 1, c.head_dim = 32;
         c.out_dtype = fa::DType::kF16;
       }},
      // Enough tokens that each item is a run of several 16-token chunks,
      // one of them across the two sequences, whose next chunk the BNSD
      // kernel prefetches (in place here; out of place above).
      {"bnsd in place, runs of chunks", [](fa::cli::RopeCase& c) {
         c.layout = fa::Layout::kBNSD, c.batch = 2, c.seq = 300, c.heads = 4, c.kv_heads = 2, c.head_dim = 64;
       }},
      {"bsh, runs of chunks", [](fa::cli::RopeCase& c) { c.batch = 2, c.seq = 300, c.heads = 4, c.kv_heads = 2, c.head_dim = 64; }},
  };
  int passed = 0, failed = 0;
  for (fa::Isa isa : isas) {
    for (fa::DType dtype : dtypes) {
      for (fa::RopeMode mode : {fa::RopeMode::kRotateHalf, fa::RopeMode::kInterleaved}) {
        for (std::size_t v = 0; v < variants.size(); ++v) {
          if (quick && v % 2 == (mode == fa::RopeMode::kRotateHalf ? 1u : 0u) && v > 1) continue;
          fa::cli::RopeCase c;
          c.dtype = dtype;
          c.isa = isa;
          c.params.mode = mode;
          c.seed = seed + v;
          c.threads = static_cast<int>(v % 3);
          variants[v].apply(c);
          fa::cli::RopeBuffers b = fa::cli::make_rope_buffers(c);
          const fa::Status st = fa::rope_forward(fa::cli::rope_params(c), b.tensors);
          if (!st.ok()) {
            std::cout << "[FAIL] " << fa::cli::describe(c) << "  " << st.message() << "\n";
            ++failed;
            continue;
          }
          const fa::cli::RopeCheck r = fa::cli::check_rope(c, b);
          char line[256];
          std::snprintf(line, sizeof line, "  max_abs=%.2e worst=%.2f of its allowance, %lld past it, nonfinite=%lld", r.max_abs_error,
                        r.worst_share, static_cast<long long>(r.mismatches), static_cast<long long>(r.nonfinite));
          std::cout << (r.pass ? "[PASS] " : "[FAIL] ") << variants[v].name << ": " << fa::cli::describe(c) << line << "\n";
          (r.pass ? passed : failed) += 1;
        }
      }
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
