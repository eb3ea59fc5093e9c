// Checks of tensor views shared by the operators' validation (params.cpp).
#pragma once

#include <cstdint>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// A view of [b, h, s, d] in `dtype` (the dtype of tensor `dtype_of`) with
// unit head_dim stride and addressable strides, or a one-line Invalid
// status naming `name`.
Status check_view(const char* name, const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t s,
                  std::int64_t d, DType dtype, const char* dtype_of = "Q");

}  // namespace fa::detail
