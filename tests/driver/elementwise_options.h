// The command-line pieces the element-wise operators' programs share (the
// norms, RoPE, the gated linear units): their dtypes, and their test
// programs' flags (--quick, --dtype, --isa, --seed) with the cases' dtypes
// and kernel paths.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli_args.h"
#include "flash_attention/flash_attention.h"

namespace fa::cli {

// The flags every element-wise benchmark ends with (threads, isa, runs,
// seed, --check and --output as the program describes them, the probe,
// JSON, help), after its own.
std::vector<FlagSpec> elementwise_benchmark_flags(std::vector<FlagSpec> own, const std::string& check_what,
                                                  const std::string& output_what);

// --flag=fp32|fp16|bf16, else a UsageError naming the flag.
DType parse_elementwise_dtype(const std::string& text, const char* flag);

struct ElementwiseTestOptions {
  bool quick = false;
  std::uint64_t seed = 1;
  std::vector<DType> dtypes;  // --dtype's, else the three
  std::vector<Isa> isas;      // --isa's, else each path `runs` accepts
  bool help = false;          // --help printed (with `title`): nothing to run
};

// Parses a test program's flags; `runs(isa)`: whether the operator's
// library runs that path on this CPU.
ElementwiseTestOptions read_elementwise_test_options(const char* program, const char* title, int argc, char** argv,
                                                     const std::function<bool(Isa)>& runs);

}  // namespace fa::cli
