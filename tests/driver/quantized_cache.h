// A quantized copy of a K/V cache (int8 with a scale per token and K/V head,
// or FP8 with a descale factor per K/V head), filled the way a serving
// engine fills one: through append_kv_cache.  For the benchmark's
// --kv-dtype and the tests of quantized caches.
#pragma once

#include <cstdint>
#include <vector>

#include "flash_attention/flash_attention.h"
#include "host_tensor.h"

namespace fa::cli {

struct QuantizedCache {
  HostBuffer k, v, k_scale, v_scale;  // the scales: int8 only
  TensorView k_view, v_view, k_scale_view, v_scale_view;
  std::vector<float> descale_k, descale_v;  // FP8 only: one per K/V head

  // Points the tensors and params at the cache (K/V views, an int8 cache's
  // scale views, an FP8 cache's descale factors).
  void bind(AttentionParams& p, AttentionTensors& t) const;
};

// What append_kv_cache needs to write into the cache a call reads (`t`'s
// int8 scale views, `p`'s FP8 factors; none for a 16-bit cache): bind's
// converse.
KvCacheScales append_scales(const AttentionParams& p, const AttentionTensors& t);

// The cache of `k` and `v` ([batch, kv_heads, seq, head_dim] views in
// `layout`, fp32, fp16 or bf16) in `kv_dtype` (int8, fp8_e4m3, fp8_e5m2),
// same shape and layout.  An FP8 head's descale factor maps its largest
// finite magnitude to the format's largest value (448, 57344), as a
// calibration would.  NaN elements stay NaN (int8: the row's scale).
Status quantize_cache(const TensorView& k, const TensorView& v, Layout layout, DType kv_dtype, QuantizedCache* out);

}  // namespace fa::cli
