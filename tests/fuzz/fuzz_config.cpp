// libFuzzer harness: --config files (driver/benchmark_config) as JSON and
// as YAML, through the flags they become and the benchmark's option reading.
// Contract as fuzz_benchmark_args.cpp's: a UsageError of one non-empty line,
// never an abort, another exception, an out-of-bounds access or undefined
// behaviour.  The first byte picks the format (even: JSON, odd: YAML).
#include <cstdint>
#include <string>
#include <vector>

#include "driver/benchmark_config.h"
#include "driver/benchmark_options.h"
#include "fuzz_args.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto format = data[0] % 2 ? fa::cli::ConfigFormat::kYaml : fa::cli::ConfigFormat::kJson;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (fa::Version v : {fa::Version::kFA2, fa::Version::kFA3}) {
    try {
      const fa::cli::ConfigFlags config = fa::cli::parse_benchmark_config(text, "fuzz", format, v);
      if (config.flags.size() != config.keys.size()) std::abort();
      std::vector<std::string> merged = fa::cli::merge_config_flags(config, {"--seq-q=8"});
      std::vector<char*> argv{const_cast<char*>("fa2_benchmark")};
      for (std::string& arg : merged) argv.push_back(arg.data());
      fa::cli::Args a("fa2_benchmark", fa::cli::benchmark_flags());
      a.parse(static_cast<int>(argv.size()), argv.data());
      fa::cli::BenchmarkOptions o = fa::cli::read_benchmark_options(a);
      fa::cli::bind_pointers(o);
    } catch (const fa::cli::UsageError& e) {
      fa::fuzz::check_usage_error(e);
    }
  }
  return 0;
}
