// One correctness case: random inputs of a given shape and options, the
// operator under test, the float64 reference, and the error between them.
// Shared by the <version>_test drivers and the GoogleTest suite.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flash_attention/flash_attention.h"

namespace fa::cli {

enum class MaskMode { kNone, kCausal, kExplicit, kCausalAndExplicit };

std::string mask_mode_name(MaskMode mode);

using ForwardFn = Status (*)(const AttentionParams&, const AttentionTensors&);
using BackwardFn = Status (*)(const AttentionParams&, const AttentionTensors&, const AttentionGrads&);

struct CaseSpec {
  // Shape, scale, threads, tiles, sparse mode and band; `mask` sets causal
  // and the explicit mask (with a sparse mode set, kCausal adds nothing).
  AttentionParams params;
  DType dtype = DType::kF32;
  Layout layout = Layout::kBSH;
  MaskMode mask = MaskMode::kNone;
  std::uint64_t seed = 1;
  double input_scale = 1.0;  // std-dev of Q and K entries (large values -> large logits)
  bool with_sinks = false;   // random per-head sink logits
  bool with_alibi = false;   // the standard ALiBi slopes 2^(-8 (h + 1) / H)
  int bias_heads = 0;        // 0: no bias; 1 or num_heads: random normal bias tensor
  // Variable-length sequences (layout TND): lengths per sequence; when set,
  // params.batch / seq_q / seq_kv are derived from them.
  std::vector<int> seq_lens_q, seq_lens_kv;
  // A KV cache of continuous batching: each sequence's key count
  // (params.seqlens_kv; params.batch is their number, params.seq_kv the
  // cache's capacity, at least the longest).  The keys past each count are
  // NaN, so a kernel that reads one fails.
  std::vector<int> cache_seqlens_kv;
  // When > 0: K and V in a paged cache of blocks of this many tokens, in a
  // random order (with cache_seqlens_kv, the table's entries past each
  // sequence's last block are -1, which no kernel may read).
  int paged_block_size = 0;
  // Also require the accuracy rule FlashAttention's tests use: our max error
  // at most twice that of a same-dtype attention (fa::same_dtype_attention).
  bool accuracy_rule = false;
  // params.softcap is used as given.
  // FP8 inputs (FA3): O's dtype (fp32, fp16 or bf16), and random descale
  // factors in [0.25, 1] per tensor (1) or per head (2); 0: none (1).
  DType out_dtype = DType::kBF16;
  int descale = 0;
  // A quantized K/V cache (int8, fp8_e4m3, fp8_e5m2) read with fp16 or bf16
  // Q: K and V drawn in `dtype`, then quantized (quantize_cache); the
  // reference reads the dequantized values.
  std::optional<DType> kv_dtype;
  // With a backward function given to run_case: the gradients in fp32
  // rather than in the inputs' dtype.
  bool fp32_grads = false;
};

struct CaseResult {
  Status status;               // from the operator under test
  double max_abs_error = 0.0;  // against the float64 reference, over O
  double rel_l2_error = 0.0;   // ||O - ref|| / ||ref|| (absolute L2 when ref is all zeros)
  std::int64_t nonfinite = 0;  // NaN or Inf in O or in a finite-expected LSE entry
  double lse_max_error = 0.0;  // relative to 1 + |lse_ref|; mismatched -inf counts as +inf
  double yardstick_max_abs = 0.0;  // with accuracy_rule: the same-dtype attention's max error
  // With a backward function: the largest relative L2 error of dQ, dK, dV
  // (and dbias, dsinks where the case has a bias or sinks), which gradient
  // it was, and whether every gradient passed (compare_gradients).
  double grad_rel_l2_error = 0.0;
  std::string worst_grad;
  bool grads_passed = false;
  bool passed = false;
};

// Relative L2 bound per dtype: 1e-5 fp32, 2e-3 fp16, 1e-2 bf16.
double rel_l2_bound(DType dtype);
inline constexpr double kLseBound = 1e-4;
// The LSE bound of a call: kLseBound, or 1e-3 for fp16 in a build with
// FA_MIXED_PRECISION_SOFTMAX=OFF, whose probabilities are fp16 (a relative
// error of up to half an fp16 ulp, 4.9e-4, in each term of the row sum).
double lse_bound(DType dtype);
// The gradients' relative L2 bound per dtype: 1e-4 fp32, 5e-3 fp16, 3e-2
// bf16 (dO and O are rounded to the dtype, and D = rowsum(dO ∘ O) enters
// every dS).
double grad_rel_l2_bound(DType dtype);

std::string describe(const CaseSpec& spec);

// Gradients a backward call wrote into `g` (dO read from it) against
// reference_backward: the relative L2 error of each.  A gradient passes
// within grad_rel_l2_bound, or for fp16 and bf16 inputs by FlashAttention's
// accuracy rule: its max error at most twice same_dtype_backward's (plus
// 1e-5 of its largest value).  The rule covers what no fixed bound can:
// where P concentrates on one key, dS = P ∘ (dP − D) cancels, and D from
// the dtype's O carries the dtype's rounding into it (a bf16 dQ 28% off in
// relative L2, the same-dtype backward 20%).
struct GradientCheck {
  Status status;  // of the references
  double rel_l2[3] = {0, 0, 0};  // dQ, dK, dV
  double worst_rel_l2 = 0.0;     // the largest, dbias and dsinks included
  std::string worst;
  std::int64_t nonfinite = 0;
  bool passed = false;
};
GradientCheck compare_gradients(const AttentionParams& p, const AttentionTensors& t, const AttentionGrads& g, DType dtype);

// The forward against reference_forward; with `backward`, then the
// gradients of a random dO against reference_backward (the forward's O and
// LSE feed the backward).
CaseResult run_case(const CaseSpec& spec, ForwardFn forward, BackwardFn backward = nullptr);

// Whether `version` offers what the case asks for (version_supports on the
// call run_case would make: varlen and sinks included).
Status case_supported(Version version, const CaseSpec& spec);

}  // namespace fa::cli
