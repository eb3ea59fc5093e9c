// What a normalization call hands every kernel path: plain data resolved by
// layer_norm.cpp (no instruction-set code), and the table each path exports.
#pragma once

#include <cstddef>
#include <cstdint>

#include "layer_norm/layer_norm.h"

namespace fa::detail {

struct NormJob {
  NormKind kind = NormKind::kLayerNorm;
  std::int64_t rows = 0, hidden = 0;
  float eps = 0.0f;
  DType x_dtype = DType::kF32, y_dtype = DType::kF32;
  const void* x = nullptr;
  std::int64_t x_stride = 0;
  const void* residual = nullptr;  // null: no fused add
  DType residual_dtype = DType::kF32;
  std::int64_t residual_stride = 0;
  void* sum = nullptr;  // x + residual, in x's dtype (optional)
  std::int64_t sum_stride = 0;
  void* y = nullptr;
  std::int64_t y_stride = 0;
  const float* gamma = nullptr;  // fp32: the caller's, or widened once per call; null: 1
  const float* beta = nullptr;   // null: 0
  float* mean = nullptr;
  float* rstd = nullptr;
  // y written around the caches (non-temporal): the call's data does not
  // fit the last-level cache, so y would not stay there for a consumer, and
  // a streamed line is not read first (a plain store reads it: a third of
  // the traffic of a copy).
  bool stream = false;
};

// Bytes of an fp32, fp16 or bf16 element.
inline std::size_t norm_elem_bytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

// Rows of `hidden` floats in each thread's scratch: the row itself (widened
// to fp32, or kept in x's dtype), then gamma and beta in another order for
// the paths that read bf16 rows as even and odd values (norm_kernels.h).
inline constexpr std::int64_t kNormScratchRows = 3;

// One path's kernels, rows [r0, r1) of the job: the norm (`row` a scratch
// of kNormScratchRows x `hidden` floats), and the residual add alone (sum =
// x + residual; `row` unused).
struct NormKernelTable {
  void (*run_rows)(const NormJob& job, std::int64_t r0, std::int64_t r1, float* row);
  void (*add_rows)(const NormJob& job, std::int64_t r0, std::int64_t r1, float* row);
};

}  // namespace fa::detail
