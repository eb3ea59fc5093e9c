// FlashAttention-3 (2024): the entry points of libflash_attention_fa3.so.  The call
// itself is the shared dispatcher's (common/forward_dispatch.cpp); what is
// FA3's own is its loop (fa3_mainloop.h), compiled into this library's
// kernel tables, and its plan (common/tile_planner.cpp, Version::kFA3).
#include "../common/forward_dispatch.h"

namespace fa {

Status fa3_forward(const AttentionParams& params, const AttentionTensors& tensors) {
  return detail::run_forward(Version::kFA3, params, tensors);
}

std::size_t fa3_workspace_bytes(const AttentionParams& params, DType dtype, int threads) {
  return detail::forward_workspace_bytes(Version::kFA3, params, dtype, threads);
}

}  // namespace fa
