// The kernel-path choice of the element-wise operators (the norms, RoPE,
// the gated linear units), header-only so each of their libraries compiles
// its own: the paths generic, avx2, avx512 and avx512bf16 (the amx path runs
// avx512bf16's kernels: the tile unit has nothing to do here), asked for by
// the caller, else by FA_ISA, else the fastest this CPU runs.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "common/cpu_features.h"
#include "common/isa_names.h"

namespace fa::detail {

inline Isa elementwise_path(Isa isa) { return isa == Isa::kAmx ? Isa::kAvx512Bf16 : isa; }

// `built(isa)`: whether the library holds that path's kernels.
template <class Built>
Status choose_elementwise_path(std::optional<Isa> forced, Built built, Isa* isa) {
  if (!forced) {
    if (const char* env = std::getenv("FA_ISA"); env && *env) {
      forced = parse_isa_text(env);
      if (!forced) {
        return Status::Invalid(std::string("FA_ISA=") + env + " is not a kernel path (expected generic, avx2, avx512, "
                               "avx512bf16 or amx)");
      }
    }
  }
  if (forced) {
    if (!built(elementwise_path(*forced))) {
      return Status::Unsupported(std::string("instruction set ") + isa_text(*forced) + " not built into this library");
    }
    if (!cpu_features().has_path(*forced)) {
      return Status::Unsupported(std::string("instruction set ") + isa_text(*forced) + " not supported by this CPU");
    }
    *isa = elementwise_path(*forced);
    return Status::Ok();
  }
  for (Isa candidate : {Isa::kAvx512Bf16, Isa::kAvx512, Isa::kAvx2}) {
    if (built(candidate) && cpu_features().has_path(candidate)) {
      *isa = candidate;
      return Status::Ok();
    }
  }
  *isa = Isa::kGeneric;
  return Status::Ok();
}

}  // namespace fa::detail
