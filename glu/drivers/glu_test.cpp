// glu_test: the gated linear units against the float64 reference on a
// matrix of cases (the four units, both split orders, fp32 / fp16 / bf16
// in and out, odd widths and vector tails, strided rows, one row to many,
// every kernel path this CPU runs), one PASS/FAIL line each, as fa2_test
// prints.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "driver/cli_args.h"
#include "driver/elementwise_options.h"
#include "glu_case.h"

namespace {

int run(int argc, char** argv) {
  const fa::cli::ElementwiseTestOptions o = fa::cli::read_elementwise_test_options(
      "glu_test", "Gated linear unit correctness tests against the float64 reference", argc, argv, [](fa::Isa isa) {
        fa::GluParams p;
        p.isa = isa;
        fa::Isa chosen;
        return fa::glu_isa(p, &chosen).ok();
      });
  if (o.help) return 0;
  const std::vector<fa::DType>& dtypes = o.dtypes;
  const std::vector<fa::Isa>& isas = o.isas;
  const std::uint64_t seed = o.seed;
  const bool quick = o.quick;
  struct Shape {
    std::int64_t rows, width, x_stride, y_stride;
    int threads;
  };
  std::vector<Shape> shapes = {{1, 1, 0, 0, 1}, {3, 37, 0, 0, 2}, {1, 4096, 0, 0, 0}, {17, 200, 450, 203, 3}};
  if (!quick) shapes.push_back({256, 1000, 0, 0, 0});
  int passed = 0, failed = 0;
  for (fa::Isa isa : isas) {
    for (fa::DType dtype : dtypes) {
      for (fa::GluKind kind : {fa::GluKind::kSwiGlu, fa::GluKind::kGeGluErf, fa::GluKind::kGeGluTanh, fa::GluKind::kReGlu}) {
        for (std::size_t s = 0; s < shapes.size(); ++s) {
          fa::cli::GluCase c;
          c.params.kind = kind;
          c.params.split = s % 2 ? fa::GluSplit::kUpFirst : fa::GluSplit::kGateFirst;
          c.rows = shapes[s].rows;
          c.width = shapes[s].width;
          c.x_row_stride = shapes[s].x_stride;
          c.y_row_stride = shapes[s].y_stride;
          c.threads = shapes[s].threads;
          c.dtype = dtype;
          // Every output dtype once per input dtype over the shapes.
          const fa::DType outs[] = {fa::DType::kF32, fa::DType::kBF16, fa::DType::kF16};
          if (s > 0) c.out_dtype = outs[s % 3];
          c.isa = isa;
          c.seed = seed + s;
          fa::cli::GluBuffers b = fa::cli::make_glu_buffers(c);
          const fa::Status st = fa::glu_forward(fa::cli::glu_params(c), b.tensors);
          if (!st.ok()) {
            std::cout << "[FAIL] " << fa::cli::describe(c) << "  " << st.message() << "\n";
            ++failed;
            continue;
          }
          const fa::cli::GluCheck r = fa::cli::check_glu(c, b);
          char line[256];
          std::snprintf(line, sizeof line, "  max_abs=%.2e worst=%.2f of its allowance, %lld past it, nonfinite=%lld", r.max_abs_error,
                        r.worst_share, static_cast<long long>(r.mismatches), static_cast<long long>(r.nonfinite));
          std::cout << (r.pass ? "[PASS] " : "[FAIL] ") << fa::cli::describe(c) << line << "\n";
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
