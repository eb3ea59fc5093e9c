// Hooks for the test suite into one kernel path's pieces.  Not a stable API.
#pragma once

#include "flash_attention/flash_attention.h"

namespace fa::testing {

// out[i] = the softmax's exp2(in[i]) as computed by `isa`'s vector code.
// False when the path is not available on this build and CPU.
FA_API bool vector_exp2(Isa isa, const float* in, float* out, int n);

// out[i] = element i of `in` (of `dtype`) widened to fp32 as `isa`'s tile
// loops widen K and V (int8 at scale 1), or with `row_path` as its row path
// widens them in registers (decoding); n a multiple of 8.  False when the
// path is not available.
FA_API bool vector_widen(Isa isa, DType dtype, const void* in, float* out, int n, bool row_path = false);

// out[i] = FP8 code i of `in` widened to bf16 (then fp32) by `isa`'s row
// path through its byte tables, as it widens K (64 codes a step) or, with
// `value_pairs`, V (codes [0, 64) and [64, 128) of each 128 as two keys'
// rows, widened as key pairs); n a multiple of 128.  False when the path
// is not available or widens no FP8 that way.
FA_API bool vector_widen_pairs(Isa isa, DType dtype, const void* in, float* out, int n, bool value_pairs);

}  // namespace fa::testing
