// The <version>_test command line (test_options.h).
#include "test_options.h"

namespace fa::cli {

std::vector<FlagSpec> test_flags() {
  return {{"quick", FlagKind::kBool, "", "run a subset (under 30 s)"},
          {"dtype", FlagKind::kString, "fp16|bf16|fp32|fp8_e4m3|fp8_e5m2",
           "only cases of this dtype (default: fp32, fp16, bf16, and on FA3 both FP8 formats)"},
          {"seed", FlagKind::kInt, "N", "seed of the random inputs (default 1)"},
          {"async", FlagKind::kBool, "", "every case with the next-tile prefetch on (default: FA_ENABLE_ASYNC of the build)"},
          {"isa", FlagKind::kString, "generic|avx2|avx512|avx512bf16|amx",
           "only this kernel path (default: every path this CPU can run)"},
          {"help", FlagKind::kBool, "", "print this help"}};
}

TestOptions read_test_options(const Args& a, Version version) {
  TestOptions o;
  o.dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  if (version == Version::kFA3) o.dtypes.insert(o.dtypes.end(), {DType::kFP8E4M3, DType::kFP8E5M2});
  if (a.has("dtype")) {
    auto dt = parse_dtype(a.str("dtype"));
    if (!dt) throw UsageError("--dtype: unknown dtype '" + a.str("dtype") + "' (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)");
    o.dtypes = {*dt};
  }
  if (a.has("isa")) {
    auto isa = parse_isa(a.str("isa"));
    if (!isa) {
      throw UsageError("--isa: unknown kernel path '" + a.str("isa") + "' (expected generic, avx2, avx512, avx512bf16 or amx)");
    }
    Isa chosen;
    AttentionParams probe;
    probe.isa = *isa;
    if (Status s = select_isa(probe, &chosen); !s.ok()) throw UsageError("--isa: " + s.message());
    o.paths = {*isa};
  } else {
    for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
      if (isa_available(isa)) o.paths.push_back(isa);
    }
  }
  o.quick = a.flag("quick");
  o.async = a.flag("async");
  o.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, std::int64_t{1} << 62));
  return o;
}

}  // namespace fa::cli
