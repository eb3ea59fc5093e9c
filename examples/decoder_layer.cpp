// Example: one Llama-style decoder layer from the library's operators,
//   RMSNorm -> QKV projection -> RoPE -> FlashAttention-2 (GQA, causal)
//   -> output projection -> residual + RMSNorm -> gate/up projection
//   -> SwiGLU -> down projection + residual,
// the projections on oneDNN's matmul.  It runs the layer once on random
// weights, checks the output against the composition of the float64
// references, and prints each stage's time.  (decoder_layer/decoder_layer.cpp
// shows each call; decoder_layer_benchmark times a layer of any shape.)
//
//   decoder_layer [--dtype=bf16|fp32]
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "decoder_layer/decoder_layer.h"

int main(int argc, char** argv) {
  fa::example::DecoderConfig config;  // 128 tokens, hidden 512, 8/2 heads of 64, MLP 1408
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dtype=fp32") {
      config.dtype = fa::DType::kF32;
    } else if (arg == "--dtype=bf16") {
      config.dtype = fa::DType::kBF16;
    } else {
      std::cerr << "error: " << arg << " is not valid: expected --dtype=bf16 or --dtype=fp32\n";
      return 2;
    }
  }
  fa::example::quiet_openmp_waits();
  std::unique_ptr<fa::example::DecoderLayer> layer;
  if (fa::Status s = fa::example::DecoderLayer::create(config, &layer); !s.ok()) {
    // oneDNN without a kernel for the dtype on this CPU (the only
    // Unsupported status create returns): not the caller's mistake, so not
    // exit 2; 77 is the test runners' "skipped".
    const bool unsupported = s.code() == fa::StatusCode::kUnsupported;
    std::cerr << (unsupported ? "skipped: " : "error: ") << s.message() << "\n";
    return unsupported ? 77 : 2;
  }
  std::array<double, fa::example::kDecoderStages> ms{};
  if (fa::Status s = layer->run(&ms); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  std::printf("Decoder layer (%s): tokens=%lld hidden=%lld heads=%lld/%lld head_dim=%lld intermediate=%lld\n",
              std::string(fa::dtype_name(config.dtype)).c_str(), static_cast<long long>(config.tokens),
              static_cast<long long>(config.hidden), static_cast<long long>(config.heads), static_cast<long long>(config.kv_heads),
              static_cast<long long>(config.head_dim), static_cast<long long>(config.intermediate));
  double total = 0;
  for (int i = 0; i < fa::example::kDecoderStages; ++i) {
    std::printf("  %-28s %8.3f ms\n", fa::example::kStageNames[static_cast<std::size_t>(i)], ms[static_cast<std::size_t>(i)]);
    total += ms[static_cast<std::size_t>(i)];
  }
  std::printf("  %-28s %8.3f ms (the first call: oneDNN and the pools warm up)\n", "total", total);
  const fa::example::DecoderCheck r = fa::example::check_decoder(*layer);
  std::printf("Check against the float64 references: error %.2e of what the layer adds (bound %.1e), max_abs %.2e, nonfinite %lld: %s\n",
              r.rel_error, r.bound, r.max_abs_error, static_cast<long long>(r.nonfinite), r.pass ? "PASS" : "FAIL");
  return r.pass ? 0 : 1;
}
