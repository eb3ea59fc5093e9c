// libFuzzer harness: the fa<N>_benchmark command line (every flag of
// driver/benchmark_options, the cu_seqlens, sinks, descale and tile lists)
// and the checks the benchmark makes next without touching files or time:
// the kernel path and the plan of each version.  Contract: a bad input is a
// one-line UsageError or a Status; nothing else escapes, nothing aborts,
// nothing reads out of bounds or hits undefined behaviour (ASan, UBSan).
#include <cstdint>

#include "driver/benchmark_options.h"
#include "fuzz_args.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fa::fuzz::Argv args("fa2_benchmark", data, size);
  try {
    fa::cli::Args a("fa2_benchmark", fa::cli::benchmark_flags());
    a.parse(args.argc(), args.argv());
    fa::cli::BenchmarkOptions o = fa::cli::read_benchmark_options(a);
    fa::cli::bind_pointers(o);
    fa::Isa isa;
    if (!fa::select_isa(o.params, &isa).ok()) return 0;
    for (fa::Version v : {fa::Version::kFA1, fa::Version::kFA2, fa::Version::kFA3}) {
      fa::TilePlan plan;
      const fa::Status s = fa::plan(v, o.params, o.dtype, &plan);
      if (!s.ok() && (s.message().empty() || s.message().find('\n') != std::string::npos)) std::abort();
    }
  } catch (const fa::cli::UsageError& e) {
    fa::fuzz::check_usage_error(e);
  }
  return 0;
}
