// FlashAttention-2 (2023): the entry points of libflash_attention_fa2.so.  The call
// itself is the shared dispatcher's (common/forward_dispatch.cpp); what is
// FA2's own is its loop (fa2_mainloop.h), compiled into this library's
// kernel tables, and its plan (common/tile_planner.cpp, Version::kFA2).
// FA2 also holds the backward pass (common/backward_dispatch.cpp and its
// loop, kernels/backward_loop.h, linked into this library only).
#include "../common/backward_dispatch.h"
#include "../common/forward_dispatch.h"

FA_VERSION_ENTRY_POINTS(2)

namespace fa {

Status fa2_backward(const AttentionParams& params, const AttentionTensors& tensors, const AttentionGrads& grads) {
  return detail::run_backward(params, tensors, grads);
}

std::size_t fa2_backward_workspace_bytes(const AttentionParams& params, DType dtype, int threads) {
  return detail::backward_workspace_bytes(params, dtype, threads);
}

}  // namespace fa
