// The definitions behind version_entry.h for the version FA_VERSION (set by
// the build per program).  Constant-initialized, so they hold before any
// other translation unit's static initializers read them.
#include "version_entry.h"

#ifndef FA_VERSION
#error "FA_VERSION must be defined by the build"
#endif
#if FA_VERSION < 1 || FA_VERSION > 3
#error "no driver entry point for this FA_VERSION"
#endif

#define FA_CLI_CAT(a, b, c) a##b##c
#define FA_CLI_ENTRY(prefix, n, suffix) FA_CLI_CAT(prefix, n, suffix)
#define FA_CLI_TEXT2(x) #x
#define FA_CLI_TEXT(x) FA_CLI_TEXT2(x)

namespace fa::cli {

const char* const kVersionTag = "fa" FA_CLI_TEXT(FA_VERSION);
const char* const kVersionTitle = "FlashAttention-v" FA_CLI_TEXT(FA_VERSION);
const Version kVersion = static_cast<Version>(FA_VERSION);
const ForwardFn kForward = &FA_CLI_ENTRY(fa, FA_VERSION, _forward);
#if FA_VERSION == 2
const BackwardFn kBackward = &fa2_backward;
std::size_t backward_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return fa2_backward_workspace_bytes(p, dtype, threads);
}
#else
const BackwardFn kBackward = nullptr;
std::size_t backward_workspace_bytes(const AttentionParams&, DType, int) { return 0; }
#endif
std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads) {
  return FA_CLI_ENTRY(fa, FA_VERSION, _workspace_bytes)(p, dtype, threads);
}

}  // namespace fa::cli
