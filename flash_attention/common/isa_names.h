// The kernel paths' and dtypes' names, header-only so the other operators'
// libraries (which do not link an attention library) name them the same way.
#pragma once

#include <optional>
#include <string_view>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

inline constexpr Isa kAllIsaValues[] = {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx};

inline constexpr const char* isa_text(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

inline std::optional<Isa> parse_isa_text(std::string_view name) {
  for (Isa isa : kAllIsaValues) {
    if (name == isa_text(isa)) return isa;
  }
  return std::nullopt;
}

inline constexpr const char* dtype_text(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kFP8E5M2: return "fp8_e5m2";
    case DType::kI8: return "int8";
  }
  return "?";
}

}  // namespace fa::detail
