// Public C++ API of rotary position embedding (RoPE) on the query and key
// tensors of attention, in their attention layouts (any strided view: BSH,
// BSND, BNSD, and TND with cu_seqlens), in place or out of place.
//
// Head h's vector x at position p has its first rotary_dim elements turned
// by the angles p * inv_freq[i], i < rotary_dim / 2, pair by pair:
//   rotate-half (GPT-NeoX, Llama): the pairs are (x[i], x[i + rotary_dim/2]);
//   interleaved (GPT-J):          the pairs are (x[2i], x[2i + 1]);
//   (a, b) -> (a cos - b sin, b cos + a sin).
// Elements past rotary_dim pass through unchanged (copied when out of
// place).  Computed in fp32 (the angles reduced in double, so a position of
// 10^6 loses nothing to fp32's angle rounding) and rounded to nearest even
// on store.  Like the attention API, nothing here aborts the process: bad
// arguments come back as a Status with a one-line message.
#pragma once

#include <cstdint>
#include <optional>

// The shared types (Status, DType, Isa, TensorView) are the attention API's,
// header-only.
#include "flash_attention/flash_attention.h"

#if defined(__GNUC__)
#define ROPE_API __attribute__((visibility("default")))
#else
#define ROPE_API
#endif

namespace fa {

enum class RopeMode { kRotateHalf, kInterleaved };

// How the frequencies base^(-2i / rotary_dim) are stretched for contexts
// longer than the model was trained on.
enum class RopeScaling {
  kNone,
  kLinear,  // position interpolation: every frequency / factor
  kNtk,     // NTK-aware: base * factor^(rotary_dim / (rotary_dim - 2))
  kLlama3,  // Llama 3.1: long wavelengths / factor, short ones kept, a smooth ramp between
};

struct RopeParams {
  RopeMode mode = RopeMode::kRotateHalf;
  std::int64_t rotary_dim = 0;  // even, <= head_dim; 0: head_dim
  double base = 10000.0;        // > 0 (Llama 3: 500000)
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;  // >= 1 for kLinear, kNtk and kLlama3
  // kLlama3 only: wavelengths above original_max_position / low_freq_factor
  // are scaled by 1 / factor, those below original_max_position /
  // high_freq_factor kept, a linear ramp in between (Llama 3.1: 1, 4, 8192).
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double original_max_position = 8192.0;
  // Variable-length sequences packed without padding (TND): the views are
  // of batch 1 ([1, heads, total, head_dim]), num_sequences sequences own
  // tokens [cu_seqlens[b], cu_seqlens[b + 1]) (int32 [num_sequences + 1],
  // from 0, non-decreasing, ending at the total), and a token's default
  // position counts from its sequence's start.
  const std::int32_t* cu_seqlens = nullptr;
  std::int64_t num_sequences = 0;
  int threads = 0;         // 0: the library's CPU set, as attention
  std::optional<Isa> isa;  // else FA_ISA, else the fastest this CPU runs
  // Separate outputs (q_out, k_out; whole vectors of head rows that start
  // on a 64-byte line) written with non-temporal stores, around the
  // caches.  Unset: when the call's inputs and outputs exceed the
  // last-level cache.  A rotation in place never streams (its lines were
  // just read).
  std::optional<bool> stream_output;
};

struct RopeTensors {
  // [batch, heads, seq, head_dim] views (TensorView, unit head_dim stride),
  // Q's and K's head counts their own, the rest alike; the same dtype
  // (fp32, fp16 or bf16).  Either may be absent (data null), not both.
  TensorView q, k;
  // Outputs: the inputs' shapes, any of the three dtypes.  Absent (data
  // null): the input is rotated in place.
  TensorView q_out, k_out;
  // Optional position of every token: int64 [batch, seq] row-major (TND:
  // [total]), >= 0, for a KV-cache step whose tokens sit at cache_len + s.
  // Null: token s of a sequence is at position s.
  const std::int64_t* positions = nullptr;
  // Optional angles given instead of computed (the params' base and
  // scaling are then unused): fp32 [table_positions, rotary_dim / 2]
  // row-major, cos and sin of position p's angles in row p.  Every position
  // must be < table_positions.
  const float* cos = nullptr;
  const float* sin = nullptr;
  std::int64_t table_positions = 0;
};

// Checks shapes, dtypes, strides, positions and params; the operator calls
// it first.
ROPE_API Status validate_rope(const RopeParams& params, const RopeTensors& tensors);

// The operator.
ROPE_API Status rope_forward(const RopeParams& params, const RopeTensors& tensors);

// The frequencies inv_freq[i], i < rotary_dim / 2, for the params' base and
// scaling (rotary_dim as resolved: params.rotary_dim, else head_dim).
ROPE_API Status rope_inv_frequencies(const RopeParams& params, std::int64_t rotary_dim, double* inv_freq);

// The float64 reference: the rotated Q and K in double, packed [batch,
// heads, seq, head_dim] (either may be null), from the same inputs.
ROPE_API Status rope_reference(const RopeParams& params, const RopeTensors& tensors, double* q_out, double* k_out);

// The kernel path a call with these params runs; an error when the one
// asked for is not available.
ROPE_API Status rope_isa(const RopeParams& params, Isa* isa);

}  // namespace fa
