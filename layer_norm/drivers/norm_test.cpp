// layer_norm_test: LayerNorm and RMSNorm against the float64 reference on a
// matrix of cases (both operators, fp32 / fp16 / bf16, the fused residual,
// with and without gamma and beta, odd widths, one row to many, every
// kernel path this CPU runs), one PASS/FAIL line each, as fa2_test prints.
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "driver/cli_args.h"
#include "driver/elementwise_options.h"
#include "norm_case.h"

namespace {

int run(int argc, char** argv) {
  const fa::cli::ElementwiseTestOptions o = fa::cli::read_elementwise_test_options(
      "layer_norm_test", "LayerNorm / RMSNorm correctness tests against the float64 reference", argc, argv, [](fa::Isa isa) {
        fa::NormParams p;
        p.isa = isa;
        fa::Isa chosen;
        return fa::norm_isa(p, &chosen).ok();
      });
  if (o.help) return 0;
  const std::vector<fa::DType>& dtypes = o.dtypes;
  const std::vector<fa::Isa>& isas = o.isas;
  const std::uint64_t seed = o.seed;
  const bool quick = o.quick;
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
