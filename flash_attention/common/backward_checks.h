// What a backward call must satisfy, checked once for the kernel's
// dispatcher (backward_dispatch.cpp) and the float64 reference
// (reference_backward.cpp) alike.
#pragma once

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// The forward call the gradients are of (validate()'s rules, with `t.o` a
// valid view), refusing what the backward pass does not take (FP8 inputs,
// quantized, paged or per-sequence-length K/V caches), and dO: Q's shape
// and dtype.  `who` opens the messages of the refusals.
Status check_backward_inputs(const AttentionParams& p, const AttentionTensors& t, const TensorView& dout, const char* who);

// The outputs of fa2_backward: dQ, dK and dV views (their inputs' shapes, in
// the input's dtype or fp32), the forward's LSE, and dbias / dsinks only
// where the call has a bias / sinks.
Status check_backward_outputs(const AttentionParams& p, const AttentionTensors& t, const AttentionGrads& g);

}  // namespace fa::detail
