// Checks of tensor views shared by the operators' validation (params.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "flash_attention/flash_attention.h"

namespace fa::detail {

// A view of [b, h, s, d] in `dtype` (the dtype of tensor `dtype_of`) with
// unit head_dim stride and addressable strides, or a one-line Invalid
// status naming `name`.
Status check_view(const char* name, const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t s,
                  std::int64_t d, DType dtype, const char* dtype_of = "Q");

// An int8 cache's scale view: given (else `missing`), fp32, [b, h, s, 1].
Status check_scale_view(const char* name, const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t s,
                        const std::string& missing);

// Dequantization factors: one, or one per `per` (`heads` of them), each
// finite and positive.
Status check_factors(const char* name, const float* values, std::int64_t count, std::int64_t heads, const char* per);

}  // namespace fa::detail
