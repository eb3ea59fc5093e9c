// FlashAttention-2 (2023): the entry points of libflash_attention_fa2.so.  The call
// itself is the shared dispatcher's (common/forward_dispatch.cpp); what is
// FA2's own is its loop (fa2_mainloop.h), compiled into this library's
// kernel tables, and its plan (common/tile_planner.cpp, Version::kFA2).
#include "../common/forward_dispatch.h"

namespace fa {

Status fa2_forward(const AttentionParams& params, const AttentionTensors& tensors) {
  return detail::run_forward(Version::kFA2, params, tensors);
}

std::size_t fa2_workspace_bytes(const AttentionParams& params, DType dtype, int threads) {
  return detail::forward_workspace_bytes(Version::kFA2, params, dtype, threads);
}

}  // namespace fa
