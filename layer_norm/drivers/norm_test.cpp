// layer_norm_test: LayerNorm and RMSNorm against the float64 reference on a
// matrix of cases (both operators, fp32 / fp16 / bf16, the fused residual,
// with and without gamma and beta, odd widths, one row to many, every
// kernel path this CPU runs), one PASS/FAIL line each, as fa2_test prints.
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "driver/cli_args.h"
#include "norm_case.h"

namespace {

using fa::cli::Args;
using fa::cli::FlagKind;
using fa::cli::UsageError;

int run(int argc, char** argv) {
  Args args("layer_norm_test", {{"quick", FlagKind::kBool, "", "run a subset"},
                                {"dtype", FlagKind::kString, "fp32|fp16|bf16", "only cases of this dtype"},
                                {"isa", FlagKind::kString, "generic|avx2|avx512|avx512bf16", "only this kernel path (default: every path this CPU runs)"},
                                {"seed", FlagKind::kInt, "N", "seed of the random inputs (default 1)"},
                                {"help", FlagKind::kBool, "", "print this help"}});
  args.parse(argc, argv);
  if (args.flag("help")) {
    std::cout << "LayerNorm / RMSNorm correctness tests against the float64 reference\n" << args.help_text();
    return 0;
  }
  std::vector<fa::DType> dtypes = {fa::DType::kF32, fa::DType::kF16, fa::DType::kBF16};
  if (args.has("dtype")) {
    const std::optional<fa::DType> d = fa::parse_dtype(args.str("dtype"));
    if (!d || (*d != fa::DType::kF32 && *d != fa::DType::kF16 && *d != fa::DType::kBF16)) {
      throw UsageError("--dtype=" + args.str("dtype") + " is not valid: expected fp32, fp16 or bf16");
    }
    dtypes = {*d};
  }
  std::vector<fa::Isa> isas;
  if (args.has("isa")) {
    const std::optional<fa::Isa> isa = fa::parse_isa(args.str("isa"));
    if (!isa) throw UsageError("--isa=" + args.str("isa") + " is not valid: expected generic, avx2 or avx512");
    isas = {*isa};
  } else {
    for (fa::Isa isa : {fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16}) {
      fa::NormParams p;
      p.isa = isa;
      fa::Isa chosen;
      if (fa::norm_isa(p, &chosen).ok()) isas.push_back(isa);
    }
  }
  const std::uint64_t seed = static_cast<std::uint64_t>(args.integer("seed", 1, 0, std::int64_t{1} << 62));
  const bool quick = args.flag("quick");
  struct Shape {
    std::int64_t rows, hidden;
    int threads;
  };
  std::vector<Shape> shapes = {{1, 1, 1}, {3, 7, 2}, {64, 4096, 0}, {17, 1000, 3}, {5, 65, 0}};
  if (!quick) shapes.push_back({1024, 768, 0});
  int passed = 0, failed = 0;
  for (fa::Isa isa : isas) {
    for (fa::DType dtype : dtypes) {
      for (fa::NormKind kind : {fa::NormKind::kLayerNorm, fa::NormKind::kRmsNorm}) {
        for (int variant = 0; variant < 4; ++variant) {
          for (const Shape& s : shapes) {
            fa::cli::NormCase c;
            c.kind = kind;
            c.rows = s.rows;
            c.hidden = s.hidden;
            c.threads = s.threads;
            c.dtype = dtype;
            c.isa = isa;
            c.seed = seed + static_cast<std::uint64_t>(s.hidden);
            c.residual = variant & 1;
            c.gamma = variant != 2;
            c.beta = variant < 2;
            c.param_dtype = variant == 3 ? dtype : fa::DType::kF32;
            if (variant == 3 && dtype == fa::DType::kF32) c.mean_offset = 1e4;  // the large-mean rows
            fa::cli::NormBuffers b = fa::cli::make_norm_buffers(c);
            const fa::Status st = fa::norm_forward(fa::cli::norm_params(c), b.tensors);
            if (!st.ok()) {
              std::cout << "[FAIL] " << fa::cli::describe(c) << "  " << st.message() << "\n";
              ++failed;
              continue;
            }
            const fa::cli::NormCheck r = fa::cli::check_norm(c, b);
            char line[256];
            std::snprintf(line, sizeof line, "  rel_l2=%.2e (bound %.0e) max_abs=%.2e stats=%.1e nonfinite=%lld",
                          r.rel_l2_error, r.bound, r.max_abs_error, r.stat_error, static_cast<long long>(r.nonfinite));
            std::cout << (r.pass ? "[PASS] " : "[FAIL] ") << fa::cli::describe(c) << line << "\n";
            (r.pass ? passed : failed) += 1;
          }
        }
      }
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return fa::cli::run_guarded(run, argc, argv); }
