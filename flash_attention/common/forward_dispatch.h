// The forward dispatcher shared by every version's entry point
// (forward_dispatch.cpp).
#pragma once

#include <cstddef>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// Validates, plans and runs one forward call with this library's loop,
// which must be `version`'s.
Status run_forward(Version version, const AttentionParams& params, const AttentionTensors& tensors);

// The bytes of workspace run_forward would take for `threads` threads.
std::size_t forward_workspace_bytes(Version version, const AttentionParams& params, DType dtype, int threads);

}  // namespace fa::detail
