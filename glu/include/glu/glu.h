// Public C++ API of the gated linear units of the Transformer MLP: an input
// row [2d] split along its last dimension into a gate g and an up
// projection u, and y = act(g) * u, [d]:
//   SwiGLU (Llama, Mistral):   act = SiLU, g * sigmoid(g);
//   GeGLU, erf form:           act = GELU, g * Phi(g) = 0.5 g (1 + erf(g / sqrt 2));
//   GeGLU, tanh form:          act = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)));
//   ReGLU:                     act = ReLU, max(g, 0).
// Computed in fp32 (the sigmoids and Phi from a non-positive exponent, so
// neither tail overflows or cancels) and rounded to nearest even on store;
// for 16-bit gates, act(g) may come from a table of the same fp32 values
// (GluParams::lookup_activation).
// Like the attention API, nothing here aborts the process: bad arguments
// come back as a Status with a one-line message.
#pragma once

#include <cstdint>
#include <optional>

// The shared types (Status, DType, Isa, RowsView) are the attention API's,
// header-only.
#include "flash_attention/flash_attention.h"

#if defined(__GNUC__)
#define GLU_API __attribute__((visibility("default")))
#else
#define GLU_API
#endif

namespace fa {

enum class GluKind { kSwiGlu, kGeGluErf, kGeGluTanh, kReGlu };

// Which half of the input row is the gate: the first (x = [g, u], as
// Hugging Face's fused gate_up projections store it) or the second.
enum class GluSplit { kGateFirst, kUpFirst };

struct GluParams {
  GluKind kind = GluKind::kSwiGlu;
  GluSplit split = GluSplit::kGateFirst;
  int threads = 0;         // 0: the library's CPU set, as attention
  std::optional<Isa> isa;  // else FA_ISA, else the fastest this CPU runs
  // y (whole vectors of rows that start on a 64-byte line) written with
  // non-temporal stores, around the caches.  Unset: when the call's x and y
  // exceed the last-level cache.
  std::optional<bool> stream_output;
  // fp16 and bf16 gates on the AVX2 and AVX-512 paths: act(g) read from a
  // table of its value at every one of the 65536 gate values, which the
  // path's own vector code computes once a process (under a millisecond,
  // 256 KiB a table), so the outputs are the same bits either way.  A gather
  // replaces the activation's 20-35 vector operations.  Gates spread over
  // the whole table (random bits, not activations) miss L1 and take ten
  // times as long.  Whether the gather beats computing depends on the core
  // (Zen 4 computes SwiGLU and GeGLU tanh faster; the table wins on Intel
  // cores and on Zen 3).  Unset: whichever ran faster on this core, the two
  // timed once a process per (path, activation, gate dtype) when the table
  // is first built (about 0.1 ms).  true: the table; false: computed.
  std::optional<bool> lookup_activation;
};

struct GluTensors {
  RowsView x;  // [rows, 2d]: fp32, fp16 or bf16
  RowsView y;  // [rows, d]: any of the three dtypes
};

// Checks shapes, dtypes and strides; the operator calls it first.
GLU_API Status validate_glu(const GluParams& params, const GluTensors& tensors);

// The operator.
GLU_API Status glu_forward(const GluParams& params, const GluTensors& tensors);

// The float64 reference: y as doubles, [rows, d] packed, from the same x
// (y's view need not be given).
GLU_API Status glu_reference(const GluParams& params, const GluTensors& tensors, double* y);

// The kernel path a call with these params runs; an error when the one
// asked for is not available.
GLU_API Status glu_isa(const GluParams& params, Isa* isa);
// Whether a call with these params and x of this dtype reads act(g) from a
// table (GluParams::lookup_activation) rather than computing it.
GLU_API bool glu_uses_activation_table(const GluParams& params, DType x_dtype);

}  // namespace fa
