#include "elementwise_options.h"

#include <iostream>
#include <optional>

namespace fa::cli {

std::vector<FlagSpec> elementwise_benchmark_flags(std::vector<FlagSpec> own, const std::string& check_what,
                                                  const std::string& output_what) {
  using K = FlagKind;
  const std::vector<FlagSpec> common = {
      {"threads", K::kInt, "N", "threads (default: all cores)"},
      {"isa", K::kString, "generic|avx2|avx512|avx512bf16", "kernel path (FA_ISA, else the fastest available)"},
      {"num-runs", K::kInt, "N", "timed runs (default 20)"},
      {"warmup-runs", K::kInt, "N", "untimed runs first (default 3)"},
      {"seed", K::kInt, "N", "seed of the random inputs (default 1)"},
      {"check", K::kBool, "", "compare " + check_what + " with the float64 reference (PASS/FAIL; exit 1 on FAIL)"},
      {"output", K::kString, "PATH", output_what},
      {"no-probe", K::kBool, "", "skip the copy-bandwidth probe"},
      {"huge-pages", K::kBool, "", "put the tensors and the copy probe's buffers on transparent huge pages (madvise)"},
      {"warm-cache", K::kBool, "", "time calls on the data the previous run left in the caches (default: the last-level cache is read over before each timed call it could hold)"},
      {"json", K::kBool, "", "print the results as one JSON object on the last line"},
      {"json-file", K::kString, "PATH", "write the JSON object to PATH"},
      {"help", K::kBool, "", "print this help"},
  };
  own.insert(own.end(), common.begin(), common.end());
  return own;
}

DType parse_elementwise_dtype(const std::string& text, const char* flag) {
  const std::optional<DType> d = parse_dtype(text);
  if (!d || (*d != DType::kF32 && *d != DType::kF16 && *d != DType::kBF16)) {
    throw UsageError(std::string("--") + flag + "=" + text + " is not valid: expected fp32, fp16 or bf16");
  }
  return *d;
}

ElementwiseTestOptions read_elementwise_test_options(const char* program, const char* title, int argc, char** argv,
                                                     const std::function<bool(Isa)>& runs) {
  Args args(program, {{"quick", FlagKind::kBool, "", "run a subset"},
                      {"dtype", FlagKind::kString, "fp32|fp16|bf16", "only cases of this (input) dtype"},
                      {"isa", FlagKind::kString, "generic|avx2|avx512|avx512bf16", "only this kernel path (default: every path this CPU runs)"},
                      {"seed", FlagKind::kInt, "N", "seed of the random inputs (default 1)"},
                      {"help", FlagKind::kBool, "", "print this help"}});
  args.parse(argc, argv);
  ElementwiseTestOptions o;
  if (args.flag("help")) {
    std::cout << title << "\n" << args.help_text();
    o.help = true;
    return o;
  }
  o.quick = args.flag("quick");
  o.seed = static_cast<std::uint64_t>(args.integer("seed", 1, 0, std::int64_t{1} << 62));
  o.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  if (args.has("dtype")) o.dtypes = {parse_elementwise_dtype(args.str("dtype"), "dtype")};
  if (args.has("isa")) {
    const std::optional<Isa> isa = parse_isa(args.str("isa"));
    if (!isa) throw UsageError("--isa=" + args.str("isa") + " is not valid: expected generic, avx2, avx512 or avx512bf16");
    o.isas = {*isa};
  } else {
    for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
      if (runs(isa)) o.isas.push_back(isa);
    }
  }
  return o;
}

}  // namespace fa::cli
