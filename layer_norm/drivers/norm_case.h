// What the norm programs share: a case (operator, shape, dtypes, options)
// with its inputs drawn or read, run through the library and checked
// against the float64 reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "driver/host_tensor.h"
#include "layer_norm/layer_norm.h"

namespace fa::cli {

struct NormCase {
  NormKind kind = NormKind::kLayerNorm;
  std::int64_t rows = 0, hidden = 0;
  DType dtype = DType::kBF16;        // x, residual, sum and y
  DType param_dtype = DType::kF32;   // gamma and beta
  bool residual = false, gamma = true, beta = true;
  std::optional<float> eps;
  int threads = 0;
  std::optional<Isa> isa;
  std::uint64_t seed = 1;
  double mean_offset = 0.0;  // added to every x (the large-mean case)
};

// The case's buffers: x (and residual), gamma, beta, y (and sum), mean, rstd.
struct NormBuffers {
  HostBuffer x, residual, gamma, beta, y, sum;
  std::vector<float> mean, rstd;
  NormTensors tensors;
};

// Draws the inputs (normal(0, 1), x plus mean_offset; gamma near 1, beta
// near 0) and binds the tensors.
NormBuffers make_norm_buffers(const NormCase& c);
NormParams norm_params(const NormCase& c);

struct NormCheck {
  double max_abs_error = 0, rel_l2_error = 0, stat_error = 0;  // y; mean and rstd (relative)
  std::int64_t nonfinite = 0;
  double bound = 0;
  bool pass = false;
};

// y, mean and rstd against the float64 reference; the bound is the output
// dtype's rounding (relative L2 1e-6 fp32, 2e-3 fp16, 1e-2 bf16) and the
// statistics' fp32 precision (1e-4 relative).
NormCheck check_norm(const NormCase& c, const NormBuffers& b);

// "layernorm", "rmsnorm".
const char* norm_kind_name(NormKind kind);
std::string describe(const NormCase& c);

}  // namespace fa::cli
