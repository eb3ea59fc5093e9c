// The backward dispatcher (backward_dispatch.cpp), called by FA2's entry
// point fa2_backward (fa2/flash_attention_fa2.cpp).
#pragma once

#include <cstddef>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// Checks and runs one backward call on the fastest (or the asked-for) path.
Status run_backward(const AttentionParams& params, const AttentionTensors& tensors, const AttentionGrads& grads);

// The bytes of workspace run_backward would take for `threads` threads (0:
// the call's own count); 0 for a call it would refuse.
std::size_t backward_workspace_bytes(const AttentionParams& params, DType dtype, int threads);

}  // namespace fa::detail
