// The algorithm version a driver binary is built for (FA_VERSION, set by
// tests/CMakeLists.txt), as a name, a Version and its entry points.
#pragma once

#include "attention_case.h"
#include "flash_attention/flash_attention.h"

#ifndef FA_VERSION
#error "FA_VERSION must be defined by the build"
#endif

namespace fa::cli {

#if FA_VERSION == 1
inline constexpr const char* kVersionTag = "fa1";
inline constexpr const char* kVersionTitle = "FlashAttention-v1";
inline constexpr Version kVersion = Version::kFA1;
inline constexpr ForwardFn kForward = &fa1_forward;
inline std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return fa1_workspace_bytes(p, dtype, threads);
}
#elif FA_VERSION == 2
inline constexpr const char* kVersionTag = "fa2";
inline constexpr const char* kVersionTitle = "FlashAttention-v2";
inline constexpr Version kVersion = Version::kFA2;
inline constexpr ForwardFn kForward = &fa2_forward;
inline std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return fa2_workspace_bytes(p, dtype, threads);
}
#elif FA_VERSION == 3
inline constexpr const char* kVersionTag = "fa3";
inline constexpr const char* kVersionTitle = "FlashAttention-v3";
inline constexpr Version kVersion = Version::kFA3;
inline constexpr ForwardFn kForward = &fa3_forward;
inline std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return fa3_workspace_bytes(p, dtype, threads);
}
#else
#error "no driver entry point for this FA_VERSION"
#endif

}  // namespace fa::cli
