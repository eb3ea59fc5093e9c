// The kernel paths' names, header-only so the other operators' libraries
// (which do not link an attention library) name them the same way.
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

}  // namespace fa::detail
