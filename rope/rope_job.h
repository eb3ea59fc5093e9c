// What a RoPE call hands every kernel path: plain data resolved by rope.cpp
// (no instruction-set code), and the table each path exports.
#pragma once

#include <cstdint>

#include "rope/rope.h"

namespace fa::detail {

// Q or K: its input and output (the input itself when in place), as element
// offsets per [batch, head, seq] step (the head_dim stride is 1).
struct RopeOperand {
  const void* in = nullptr;
  void* out = nullptr;
  DType in_dtype = DType::kF32, out_dtype = DType::kF32;
  std::int64_t heads = 0;
  std::int64_t in_strides[3] = {0, 0, 0}, out_strides[3] = {0, 0, 0};
};

struct RopeJob {
  RopeMode mode = RopeMode::kRotateHalf;
  std::int64_t head_dim = 0, rotary_dim = 0;
  RopeOperand operands[2];
  int num_operands = 0;
  std::int64_t batch = 0, seq = 0;  // the views' (TND: 1 and the total)
  const std::int32_t* cu_seqlens = nullptr;
  std::int64_t num_sequences = 0;
  const std::int64_t* positions = nullptr;  // null: the token's index in its sequence
  const double* inv_freq = nullptr;         // computed angles: position * inv_freq[i]
  const float* cos_table = nullptr;         // or given: row `position`, rotary_dim / 2 each
  const float* sin_table = nullptr;
  // Work items: tokens in chunks of `chunk` (<= kRopeMaxChunk), and each
  // chunk's heads (Q's, then K's) in groups of `heads_per_item`.
  std::int64_t chunk = 1, heads_per_item = 1;
  // Separate outputs through non-temporal stores (RopeParams::stream_output).
  bool stream = false;
};

inline constexpr std::int64_t kRopeMaxChunk = 64;

// Floats of scratch a thread needs: the chunk's cos and sin rows expanded
// to the mode's pairing (rotary_dim each per token).
inline std::int64_t rope_scratch_floats(const RopeJob& job) { return job.chunk * 2 * job.rotary_dim; }

// One path's kernel: tokens [t0, t1) (t = b * seq + s) of heads [h0, h1)
// counted over Q's heads then K's.
struct RopeKernelTable {
  void (*run)(const RopeJob& job, std::int64_t t0, std::int64_t t1, std::int64_t h0, std::int64_t h1, float* scratch);
};

}  // namespace fa::detail
