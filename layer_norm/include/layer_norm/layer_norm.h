// Public C++ API of the normalization operators: LayerNorm and RMSNorm over
// the last dimension of a [rows, hidden] matrix, optionally fused with the
// residual add before them (the pre-norm block's `h = x + residual; y =
// norm(h)`).  Statistics in fp32 for every dtype, the variance in two passes
// over the row (never E[x^2] - E[x]^2, which cancels catastrophically when
// the mean is large against the spread).  Like the attention API, nothing
// here aborts the process: bad arguments come back as a Status with a
// one-line message.
#pragma once

#include <cstdint>
#include <optional>

// The shared types (Status, DType, Isa, RowsView) are the attention API's,
// header-only.
#include "flash_attention/flash_attention.h"

#if defined(__GNUC__)
#define LN_API __attribute__((visibility("default")))
#else
#define LN_API
#endif

namespace fa {

enum class NormKind { kLayerNorm, kRmsNorm };

struct NormParams {
  NormKind kind = NormKind::kLayerNorm;
  // Added to the variance (LayerNorm) or the mean square (RMSNorm) under the
  // square root; > 0.  Unset: 1e-5 for LayerNorm, 1e-6 for RMSNorm.
  std::optional<float> eps;
  int threads = 0;           // 0: the library's CPU set, as attention
  std::optional<Isa> isa;    // else FA_ISA, else the fastest this CPU runs (generic, avx2, avx512, avx512bf16; amx runs avx512bf16)
  // y (whole 64-byte-aligned rows of it; with a residual, the sum's too)
  // written with non-temporal stores, around the caches.  Unset: when the
  // call's x and y exceed the last-level cache (y would not stay there for
  // its consumer, and a streamed line is not read before it is written).
  // residual_add streams the sum alike.
  std::optional<bool> stream_output;
};

struct NormTensors {
  RowsView x;  // the input
  // Optional (data null: absent).  With a residual the operator normalizes
  // h = x + residual, rounded to x's dtype, and writes h to `sum` when
  // given (x's shape and dtype): the same bits as an add followed by the
  // norm, in one pass over memory.
  RowsView residual, sum;
  // Optional [hidden] scale and shift, fp32 or x's dtype (null: 1 and 0).
  // RMSNorm takes no beta.
  const void* gamma = nullptr;
  const void* beta = nullptr;
  DType param_dtype = DType::kF32;
  RowsView y;             // the output: x's shape, any of the three dtypes
  float* mean = nullptr;  // optional [rows]: LayerNorm's row means
  float* rstd = nullptr;  // optional [rows]: 1 / sqrt(variance or mean square + eps)
};

// Checks shapes, dtypes, strides and eps; the operator calls it first.
LN_API Status validate_norm(const NormParams& params, const NormTensors& tensors);

// The operator (LayerNorm or RMSNorm by params.kind).
LN_API Status norm_forward(const NormParams& params, const NormTensors& tensors);

// The residual add alone: sum = x + residual, rounded to x's dtype (the
// bits norm_forward's fused call writes to `sum`); y, gamma, beta, mean
// and rstd unused.  The first of the two separate calls the fused one
// replaces (layer_norm_benchmark --compare-unfused times both).
LN_API Status residual_add(const NormParams& params, const NormTensors& tensors);

// The float64 reference: y (rows x hidden, packed), mean and rstd (rows)
// in double, from the same inputs (a residual's sum rounded to x's dtype as
// the operator rounds it).  Any of the outputs may be null.
LN_API Status norm_reference(const NormParams& params, const NormTensors& tensors, double* y, double* mean,
                             double* rstd);

// The kernel path a call with these params runs (the choice above); an
// error when the one asked for is not available.
LN_API Status norm_isa(const NormParams& params, Isa* isa);

}  // namespace fa
