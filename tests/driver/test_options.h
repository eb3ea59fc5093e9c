// The <version>_test command line: its flags and the options read from them
// (test_options.cpp), apart from the program so the fuzzing harnesses drive
// the same code.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cli_args.h"
#include "flash_attention/flash_attention.h"

namespace fa::cli {

std::vector<FlagSpec> test_flags();

struct TestOptions {
  std::vector<DType> dtypes;  // fp32, fp16, bf16, and FP8's two for FA3; or --dtype's
  std::vector<Isa> paths;     // every path this CPU runs, or --isa's
  std::optional<DType> kv_dtype;  // --kv-dtype: every case over a quantized cache
  bool quick = false, async = false;
  bool backward = false;  // --backward: each case's gradients too (FA2)
  std::uint64_t seed = 1;
};

// Every flag's value, checked; a bad one throws one UsageError line.
TestOptions read_test_options(const Args& a, Version version);

}  // namespace fa::cli
