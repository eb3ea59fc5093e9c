// The <version>_test command line (test_options.h).
#include "test_options.h"

namespace fa::cli {

std::vector<FlagSpec> test_flags() {
  return {{"quick", FlagKind::kBool, "", "run a subset (under 30 s)"},
          {"dtype", FlagKind::kString, "fp16|bf16|fp32|fp8_e4m3|fp8_e5m2",
           "only cases of this dtype (default: fp32, fp16, bf16, and on FA3 both FP8 formats)"},
          {"kv-dtype", FlagKind::kString, "int8|fp8_e4m3|fp8_e5m2",
           "every case with a quantized K/V cache read with fp16 or bf16 Q (FA2, FA3; default dtypes fp16 and bf16)"},
          {"seed", FlagKind::kInt, "N", "seed of the random inputs (default 1)"},
          {"backward", FlagKind::kBool, "", "also check the backward pass (FA2): dQ, dK, dV (and dbias, dsinks) of each case against the float64 reference"},
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
    if (!dt || *dt == DType::kI8) {
      throw UsageError("--dtype: " + (dt ? "int8 is a K/V cache dtype (--kv-dtype=int8 with --dtype=fp16 or bf16)"
                                         : "unknown dtype '" + a.str("dtype") + "'") +
                       " (expected fp16, bf16, fp32, fp8_e4m3 or fp8_e5m2)");
    }
    o.dtypes = {*dt};
  }
  if (a.has("kv-dtype")) {
    auto kv = parse_dtype(a.str("kv-dtype"));
    if (!kv || !is_quantized_kv(*kv)) {
      throw UsageError("--kv-dtype: '" + a.str("kv-dtype") + "' is not a quantized cache dtype (expected int8, fp8_e4m3 "
                       "or fp8_e5m2)");
    }
    if (!a.has("dtype")) o.dtypes = {DType::kF16, DType::kBF16};
    for (DType d : o.dtypes) {
      if (d != DType::kF16 && d != DType::kBF16) {
        throw UsageError("--kv-dtype: a quantized cache is read with --dtype=fp16 or bf16 (got " +
                         std::string(dtype_name(d)) + ")");
      }
    }
    o.kv_dtype = *kv;
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
  o.backward = a.flag("backward");
  if (o.backward) {
    if (version != Version::kFA2) {
      throw UsageError("--backward: " + std::string(version_name(version)) +
                       " has no backward pass (FA2 has one: fa2_test --backward)");
    }
    if (o.kv_dtype) throw UsageError("--backward: not with --kv-dtype (a quantized cache is an inference layout)");
    if (a.has("dtype") && is_fp8(o.dtypes[0])) {
      throw UsageError("--backward: --dtype=" + a.str("dtype") + " has no backward pass (expected fp16, bf16 or fp32)");
    }
  }
  o.seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0, std::int64_t{1} << 62));
  return o;
}

}  // namespace fa::cli
