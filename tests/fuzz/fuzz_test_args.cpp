// libFuzzer harness: the fa<N>_test command line (driver/test_options) for
// each version.  Contract as fuzz_benchmark_args.cpp's.
#include <cstdint>

#include "driver/test_options.h"
#include "fuzz_args.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (fa::Version v : {fa::Version::kFA1, fa::Version::kFA2, fa::Version::kFA3}) {
    fa::fuzz::Argv args("fa2_test", data, size);
    try {
      fa::cli::Args a("fa2_test", fa::cli::test_flags());
      a.parse(args.argc(), args.argv());
      const fa::cli::TestOptions o = fa::cli::read_test_options(a, v);
      if (o.dtypes.empty()) std::abort();
    } catch (const fa::cli::UsageError& e) {
      fa::fuzz::check_usage_error(e);
    }
  }
  return 0;
}
