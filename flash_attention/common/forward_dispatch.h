// The forward dispatcher shared by every version's entry point
// (forward_dispatch.cpp).
#pragma once

#include <cstddef>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// Validates, plans and runs one forward call with this library's loop,
// which must be `version`'s.
Status run_forward(Version version, const AttentionParams& params, const AttentionTensors& tensors);

struct AttentionJob;
// A call's shape into a job: dtype (Q's, K/V's and O's alike), batch,
// sequence lengths, heads, the GQA group, head_dim.
void set_shape_fields(const AttentionParams& params, DType dtype, AttentionJob* job);
// What a call's scores are, into a job: the explicit mask, the scale (log2
// units), the key window, sinks, softcap, ALiBi, the bias and dropout; the
// forward's loops and the backward read them alike.
void set_score_fields(const AttentionParams& params, AttentionJob* job);

// The bytes of workspace run_forward would take for `threads` threads.
std::size_t forward_workspace_bytes(Version version, const AttentionParams& params, DType dtype, int threads);

}  // namespace fa::detail

// A version's public entry points (fa<N>_forward, fa<N>_workspace_bytes),
// all of them the dispatcher with that version's number: the code that is
// the version's own is its loop, compiled into the same library.
#define FA_VERSION_ENTRY_POINTS(N)                                                                   \
  namespace fa {                                                                                     \
  Status fa##N##_forward(const AttentionParams& params, const AttentionTensors& tensors) {           \
    return detail::run_forward(Version::kFA##N, params, tensors);                                    \
  }                                                                                                  \
  std::size_t fa##N##_workspace_bytes(const AttentionParams& params, DType dtype, int threads) {     \
    return detail::forward_workspace_bytes(Version::kFA##N, params, dtype, threads);                 \
  }                                                                                                  \
  }
