// The algorithm version a driver binary is built for (FA_VERSION, set by
// tests/CMakeLists.txt), as a name and a forward entry point.
#pragma once

#include "attention_case.h"
#include "flash_attention/flash_attention.h"

#ifndef FA_VERSION
#error "FA_VERSION must be defined by the build"
#endif

namespace fa::cli {

#if FA_VERSION == 2
inline constexpr const char* kVersionTag = "fa2";
inline constexpr const char* kVersionTitle = "FlashAttention-v2";
inline constexpr ForwardFn kForward = &fa2_forward;
inline std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return fa2_workspace_bytes(p, dtype, threads);
}
#else
#error "no driver entry point for this FA_VERSION"
#endif

}  // namespace fa::cli
