// The algorithm version a driver program is built for, as a name, a Version
// and its entry points.  Declared here, defined once per version by
// version_entry.cpp (compiled with FA_VERSION for each program), so the
// programs' large sources (the benchmark, the correctness matrix, the
// property tests) compile once and link into every version's program.
#pragma once

#include <cstddef>

#include "attention_case.h"
#include "flash_attention/flash_attention.h"

namespace fa::cli {

extern const char* const kVersionTag;    // "fa2"
extern const char* const kVersionTitle;  // "FlashAttention-v2"
extern const Version kVersion;
extern const ForwardFn kForward;
// The backward pass, where the version has one (FA2); null otherwise.
extern const BackwardFn kBackward;
std::size_t version_workspace_bytes(const AttentionParams& p, DType dtype, int threads);
// 0 where the version has no backward pass.
std::size_t backward_workspace_bytes(const AttentionParams& p, DType dtype, int threads);

}  // namespace fa::cli
