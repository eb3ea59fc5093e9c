// The algorithm version a driver binary is built for (FA_VERSION, set by
// tests/CMakeLists.txt), as a name, a Version and its entry points.
#pragma once

#include "attention_case.h"
#include "flash_attention/flash_attention.h"

#ifndef FA_VERSION
#error "FA_VERSION must be defined by the build"
#endif

namespace fa::cli {

#if FA_VERSION < 1 || FA_VERSION > 3
#error "no driver entry point for this FA_VERSION"
#endif

#define FA_CLI_CAT(a, b, c) a##b##c
#define FA_CLI_ENTRY(prefix, n, suffix) FA_CLI_CAT(prefix, n, suffix)
#define FA_CLI_TEXT2(x) #x
#define FA_CLI_TEXT(x) FA_CLI_TEXT2(x)

inline constexpr const char* kVersionTag = "fa" FA_CLI_TEXT(FA_VERSION);
inline constexpr const char* kVersionTitle = "FlashAttention-v" FA_CLI_TEXT(FA_VERSION);
inline constexpr Version kVersion = static_cast<Version>(FA_VERSION);
inline constexpr ForwardFn kForward = &FA_CLI_ENTRY(fa, FA_VERSION, _forward);
// The backward pass, where the version has one (FA2).
#if FA_VERSION == 2
inline constexpr BackwardFn kBackward = &fa2_backward;
inline std::size_t backward_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return fa2_backward_workspace_bytes(p, dtype, threads);
}
#else
inline constexpr BackwardFn kBackward = nullptr;
inline std::size_t backward_workspace_bytes(const AttentionParams&, DType, int) { return 0; }
#endif
inline std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return FA_CLI_ENTRY(fa, FA_VERSION, _workspace_bytes)(p, dtype, threads);
}

}  // namespace fa::cli
