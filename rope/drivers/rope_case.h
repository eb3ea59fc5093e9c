// What the RoPE programs share: a case (shape, layout, mode, scaling,
// positions, dtypes) with its inputs drawn, run through the library and
// checked against the float64 reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "driver/host_tensor.h"
#include "rope/rope.h"

namespace fa::cli {

struct RopeCase {
  std::int64_t batch = 1, seq = 1, heads = 1, kv_heads = 1, head_dim = 64;
  Layout layout = Layout::kBSH;
  std::vector<std::int32_t> cu_seqlens;  // TND: sequences + 1 entries; batch is then 1 and seq the total
  DType dtype = DType::kBF16;            // q and k
  std::optional<DType> out_dtype;        // out of place in this dtype; unset: in place
  RopeParams params;                     // mode, rotary_dim, base, scaling (threads and isa below)
  // Positions: -1 the default (each token's index in its sequence), else
  // position_offset + that index through the positions array (a KV-cache
  // step), or random in [0, 2^20) with random_positions.
  std::int64_t position_offset = -1;
  bool random_positions = false;
  bool tables = false;  // cos/sin passed in (computed here in double), not computed by the operator
  int threads = 0;
  std::optional<Isa> isa;
  std::uint64_t seed = 1;
  bool with_reference = true;  // computed with the buffers (a benchmark without --check skips it)
};

struct RopeBuffers {
  HostBuffer q, k, q_out, k_out;
  std::vector<std::int64_t> positions;
  std::vector<float> cos, sin;
  std::vector<double> q_ref, k_ref;  // the reference, taken before an in-place call
  RopeTensors tensors;
};

RopeParams rope_params(const RopeCase& c);

// Draws Q and K (normal(0, 1)), binds the views in the case's layout, the
// positions and tables, and computes the float64 reference.
RopeBuffers make_rope_buffers(const RopeCase& c);

struct RopeCheck {
  double max_abs_error = 0, rel_l2_error = 0;
  std::int64_t nonfinite = 0, mismatches = 0;  // elements past their allowance
  double worst_share = 0;  // the largest error as a share of its element's allowance
  bool pass = false;
};

// Q and K after the call against the reference: every element within the
// output dtype's half ulp of the reference (plus fp32's own error, 2^-22 of
// the pair's magnitude), and NaN nowhere.
RopeCheck check_rope(const RopeCase& c, const RopeBuffers& b);

// Bytes of Q and K a call reads and writes (the rotary part only in place).
double rope_bytes_moved(const RopeCase& c);

std::string describe(const RopeCase& c);

}  // namespace fa::cli
