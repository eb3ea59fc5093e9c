// What the GLU programs share: a case (activation, split, shape, dtypes)
// with its input drawn, run through the library and checked against the
// float64 reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "driver/host_tensor.h"
#include "glu/glu.h"

namespace fa::cli {

struct GluCase {
  GluParams params;  // kind and split (threads and isa below)
  std::int64_t rows = 1, width = 1;  // y is [rows, width], x [rows, 2 width]
  DType dtype = DType::kBF16;        // x
  std::optional<DType> out_dtype;    // y (unset: x's)
  std::int64_t x_row_stride = 0, y_row_stride = 0;  // 0: packed
  double scale = 3.0;  // x ~ normal(0, scale): both sides of every activation's bend
  int threads = 0;
  std::optional<Isa> isa;
  std::uint64_t seed = 1;
  bool with_reference = true;  // computed with the buffers (a benchmark without --check skips it)
};

struct GluBuffers {
  HostBuffer x, y;
  std::vector<double> ref;  // [rows, width]
  GluTensors tensors;
};

GluParams glu_params(const GluCase& c);
GluBuffers make_glu_buffers(const GluCase& c);

struct GluCheck {
  double max_abs_error = 0, rel_l2_error = 0, worst_share = 0;
  std::int64_t nonfinite = 0, mismatches = 0;
  bool pass = false;
};

// y against the reference: every element within y's half ulp plus fp32's
// error in the activation (2^-21 of the value, times 4 plus the size of the
// exponential's argument: a sigmoid of -60 carries 60 x fp32's rounding
// from its exponent), NaN where the reference has NaN and nowhere else.
GluCheck check_glu(const GluCase& c, const GluBuffers& b);

// "swiglu", "geglu", "geglu-tanh", "reglu".
const char* glu_kind_name(GluKind kind);
std::optional<GluKind> parse_glu_kind(const std::string& name);
std::string describe(const GluCase& c);

}  // namespace fa::cli
