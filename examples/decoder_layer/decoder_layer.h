// One Llama-style decoder layer over the library's operators, with the
// projections on oneDNN's matmul (the GEMM library users would pick; this
// project writes no GEMM):
//   h   = x + Wo · attention(rope(q), rope(k), v),  [q k v] = Wqkv · rmsnorm(x)
//   out = h + Wdown · swiglu(Wgate_up · rmsnorm(h))
// for one sequence of `tokens` (a prefill), GQA and causal, in bf16 or
// fp32.  Each stage is timed; `decoder_reference` composes the operators'
// float64 references (and double matmuls) for the check.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flash_attention/flash_attention.h"

namespace fa::example {

struct DecoderConfig {
  std::int64_t tokens = 128, hidden = 512, heads = 8, kv_heads = 2, head_dim = 64, intermediate = 1408;
  DType dtype = DType::kBF16;  // activations and weights: bf16 or fp32
  double rope_base = 500000.0;
  float eps = 1e-5f;
  int threads = 0;
  std::uint64_t seed = 1;
};

// The stages in the order they run.
inline constexpr int kDecoderStages = 9;
inline constexpr std::array<const char*, kDecoderStages> kStageNames = {
    "rmsnorm (input)", "qkv projection", "rope", "attention", "output projection",
    "residual + rmsnorm", "gate/up projection", "swiglu", "down projection + residual"};

// Sets OMP_WAIT_POLICY=passive unless the environment sets it, before
// oneDNN starts its OpenMP threads: they otherwise spin after each matmul
// and take the cores from the library's next stage (measured on the
// benchmark's default layer, 2-vCPU Zen 4: 238 ms a layer spinning, 208
// passive; the attention stage 12.7 ms against 6.6).
void quiet_openmp_waits();

// Floating-point operations of each stage (2 per multiply-add; the
// element-wise stages count none and report bandwidth instead).
std::array<double, kDecoderStages> stage_flops(const DecoderConfig& c);

// The layer's weights and activations, random (normal, scaled so every
// stage's output stays of order 1) from the seed; one call to `run`.
class DecoderLayer {
 public:
  // Builds the weights and oneDNN's primitives (weights reordered once);
  // an error when the config is not valid or oneDNN refuses it.
  static Status create(const DecoderConfig& config, std::unique_ptr<DecoderLayer>* out);
  ~DecoderLayer();

  // Runs the layer on the stored input; stage_ms (optional) gets each
  // stage's time.
  Status run(std::array<double, kDecoderStages>* stage_ms);

  const DecoderConfig& config() const { return config_; }
  // The input x and the output out, [tokens, hidden] in the config's dtype.
  const void* input() const;
  const void* output() const;
  // The weights as the reference reads them (fp32 copies of the stored
  // values), row-major [K, N]: x · W.
  const std::vector<float>& weight(int which) const;  // 0 qkv, 1 o, 2 gate_up, 3 down
  const std::vector<float>& norm_gamma(int which) const;  // 0 input, 1 post-attention

 private:
  DecoderLayer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  DecoderConfig config_;
};

// The layer composed of float64 references (each stage's result rounded to
// fp32 between stages), from the layer's own input and weights: out
// [tokens, hidden].
Status decoder_reference(const DecoderLayer& layer, std::vector<double>* out);

struct DecoderCheck {
  // ||out - ref|| / ||ref - x||: the error against what the layer adds to
  // its input (the residual alone would hide a wrong branch).
  double rel_error = 0, max_abs_error = 0, bound = 0;
  std::int64_t nonfinite = 0;
  bool pass = false;
};
// Measured: 8.5e-7 (fp32) and 6.2e-3 (bf16, a rounding at each of ten
// stages) at the example's shape; the bounds leave 12x and 4x.
inline constexpr double kDecoderBoundF32 = 1e-5, kDecoderBoundBF16 = 2.5e-2;

// The layer's output against decoder_reference.
DecoderCheck check_decoder(const DecoderLayer& layer);

}  // namespace fa::example
