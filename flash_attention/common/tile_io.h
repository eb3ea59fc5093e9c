// Moving tiles between the caller's tensors (any dtype, any row stride) and
// the fp32 working buffers of a kernel.  Templated on the storage dtype so the
// conversion is chosen once per call, not per element.
#pragma once

#include <cstdint>

#include "dtype_convert.h"
#include "flash_attention/flash_attention.h"

namespace fa::detail {

template <DType DT>
struct Storage;
template <>
struct Storage<DType::kF32> {
  using type = float;
  static float to_f32(float x) { return x; }
  static float from_f32(float x) { return x; }
};
template <>
struct Storage<DType::kF16> {
  using type = std::uint16_t;
  static float to_f32(std::uint16_t x) { return f16_to_f32(x); }
  static std::uint16_t from_f32(float x) { return f32_to_f16(x); }
};
template <>
struct Storage<DType::kBF16> {
  using type = std::uint16_t;
  static float to_f32(std::uint16_t x) { return bf16_to_f32(x); }
  static std::uint16_t from_f32(float x) { return f32_to_bf16(x); }
};

// dst[r * dim + d] = scale * src[r * row_stride + d] for r < rows, d < dim.
template <DType DT>
void load_rows(const void* src, std::int64_t row_stride, int rows, int dim, float scale, float* dst) {
  using S = Storage<DT>;
  const auto* in = static_cast<const typename S::type*>(src);
  for (int r = 0; r < rows; ++r) {
    const auto* row = in + r * row_stride;
    float* out = dst + r * dim;
    for (int d = 0; d < dim; ++d) out[d] = S::to_f32(row[d]) * scale;
  }
}

// dst[d * ld + r] = src[r * row_stride + d]: rows become columns, so a
// product against the tile vectorizes over its rows.
template <DType DT>
void load_rows_transposed(const void* src, std::int64_t row_stride, int rows, int dim, int ld,
                          float* dst) {
  using S = Storage<DT>;
  const auto* in = static_cast<const typename S::type*>(src);
  for (int r = 0; r < rows; ++r) {
    const auto* row = in + r * row_stride;
    for (int d = 0; d < dim; ++d) dst[d * ld + r] = S::to_f32(row[d]);
  }
}

// dst[r * row_stride + d] = src[r * dim + d] * row_scale[r].
template <DType DT>
void store_rows(const float* src, int rows, int dim, const float* row_scale, void* dst,
                std::int64_t row_stride) {
  using S = Storage<DT>;
  auto* out = static_cast<typename S::type*>(dst);
  for (int r = 0; r < rows; ++r) {
    const float* in = src + r * dim;
    auto* row = out + r * row_stride;
    const float s = row_scale[r];
    for (int d = 0; d < dim; ++d) row[d] = S::from_f32(in[d] * s);
  }
}

inline void prefetch_rows(const void* base, std::int64_t row_stride_bytes, int rows, int row_bytes) {
  const char* p = static_cast<const char*>(base);
  for (int r = 0; r < rows; ++r) {
    for (int off = 0; off < row_bytes; off += 64) __builtin_prefetch(p + r * row_stride_bytes + off, 0, 3);
  }
}

}  // namespace fa::detail
