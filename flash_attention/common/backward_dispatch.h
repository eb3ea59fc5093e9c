// The backward dispatcher (backward_dispatch.cpp), called by FA2's entry
// point fa2_backward (fa2/flash_attention_fa2.cpp).
#pragma once

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// Checks and runs one backward call on the fastest (or the asked-for) path.
Status run_backward(const AttentionParams& params, const AttentionTensors& tensors, const AttentionGrads& grads);

}  // namespace fa::detail
