// Appending new tokens' keys and values to a KV cache (vLLM's
// reshape_and_cache): one row per (token, K/V head), to the slot the caller
// names, in a contiguous cache or a paged pool alike; copied, or quantized
// into an int8 or FP8 cache.
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtype_convert.h"
#include "flash_attention/flash_attention.h"
#include "tensor_checks.h"
#include "thread_pool.h"

namespace fa {

namespace {

// The scales a quantized cache of `cache` dtype needs: an int8 cache's
// views, an FP8 cache's descale factors (or none: 1).
Status check_cache_scales(const KvCacheScales& scales, DType cache, std::int64_t B, std::int64_t H, std::int64_t S) {
  for (const auto& [name, view] : {std::pair{"scales.k", &scales.k}, std::pair{"scales.v", &scales.v}}) {
    if (cache != DType::kI8) {
      if (view->data) return Status::Invalid(std::string(name) + " applies to int8 caches only (the cache is " +
                                             std::string(dtype_name(cache)) + ")");
      continue;
    }
    if (Status s = detail::check_scale_view(name, *view, B, H, S,
                                            "an int8 cache needs its scale view (fp32 [batch, kv_heads, seq, 1])");
        !s.ok()) {
      return s;
    }
  }
  for (const auto& [name, values, count] : {std::tuple{"scales.descale_k", scales.descale_k, scales.descale_k_count},
                                            std::tuple{"scales.descale_v", scales.descale_v, scales.descale_v_count}}) {
    if (!values) continue;
    if (!is_fp8(cache)) {
      return Status::Invalid(std::string(name) + " applies to FP8 caches only (the cache is " +
                             std::string(dtype_name(cache)) + ")");
    }
    if (Status s = detail::check_factors(name, values, count, H, "K/V head"); !s.ok()) return s;
  }
  return Status::Ok();
}

// One row of D new values (fp32) into a quantized cache row: int8 scaled by
// the row's absolute maximum / 127 (the scale written to *scale; a NaN or
// Inf in the row makes it NaN or Inf, so the row reads back non-finite),
// FP8 divided by its descale factor.
void quantize_row(const float* x, std::int64_t D, DType cache, float descale, void* out, float* scale) {
  if (cache == DType::kI8) {
    float amax = 0.0f;
    for (std::int64_t d = 0; d < D; ++d) amax = std::isnan(x[d]) || std::fabs(x[d]) > amax ? std::fabs(x[d]) : amax;
    *scale = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (std::int64_t d = 0; d < D; ++d) detail::store_from_f32(out, cache, d, x[d] * inv);
    return;
  }
  for (std::int64_t d = 0; d < D; ++d) detail::store_from_f32(out, cache, d, x[d] / descale);
}

}  // namespace

Status append_kv_cache(const TensorView& k_new, const TensorView& v_new, const std::int64_t* slots,
                       const TensorView& k_cache, const TensorView& v_cache, int threads) {
  return append_kv_cache(k_new, v_new, slots, k_cache, v_cache, KvCacheScales{}, threads);
}

Status append_kv_cache(const TensorView& k_new, const TensorView& v_new, const std::int64_t* slots,
                       const TensorView& k_cache, const TensorView& v_cache, const KvCacheScales& scales, int threads) {
  const std::int64_t H = k_new.shape[1], T = k_new.shape[2], D = k_new.shape[3];
  const DType dtype = k_new.dtype;
  if (H <= 0 || D <= 0 || T < 0) {
    return Status::Invalid("k_new: shape [" + std::to_string(k_new.shape[0]) + ", " + std::to_string(H) + ", " +
                           std::to_string(T) + ", " + std::to_string(D) +
                           "] is not [1, kv_heads > 0, tokens >= 0, head_dim > 0]");
  }
  if (Status s = detail::check_view("k_new", k_new, 1, H, T, D, dtype); !s.ok()) return s;
  if (Status s = detail::check_view("v_new", v_new, 1, H, T, D, dtype, "k_new"); !s.ok()) return s;
  const std::int64_t B = k_cache.shape[0], S = k_cache.shape[2];
  if (B <= 0 || S <= 0) {
    return Status::Invalid("k_cache: batch and seq must be positive (got " + std::to_string(B) + " and " +
                           std::to_string(S) + ")");
  }
  // A quantized cache (int8, FP8) takes 16-bit or fp32 tokens; any other
  // cache, tokens of its own dtype.
  const DType cache = k_cache.dtype;
  const bool quantize = cache != dtype && is_quantized_kv(cache) && !is_quantized_kv(dtype) && dtype != DType::kI8;
  if (cache != dtype && !quantize) {
    return Status::Invalid("k_cache: dtype " + std::string(dtype_name(cache)) + " differs from k_new's dtype " +
                           std::string(dtype_name(dtype)) + " (a quantized cache, int8, fp8_e4m3 or fp8_e5m2, takes "
                           "fp32, fp16 or bf16 tokens)");
  }
  if (Status s = detail::check_view("k_cache", k_cache, B, H, S, D, cache); !s.ok()) return s;
  if (Status s = detail::check_view("v_cache", v_cache, B, H, S, D, cache, "k_cache"); !s.ok()) return s;
  if (Status s = check_cache_scales(scales, quantize ? cache : dtype, B, H, S); !s.ok()) return s;
  if (threads < 0 || threads > kMaxThreads) {
    return Status::Invalid("threads must be 0 (all cores) or a count from 1 to " + std::to_string(kMaxThreads) +
                           " (got " + std::to_string(threads) + ")");
  }
  if (T == 0) return Status::Ok();
  if (!slots) return Status::Invalid("slots is null (expected one slot per new token)");
  for (std::int64_t t = 0; t < T; ++t) {
    if (slots[t] >= B * S) {
      return Status::Invalid("slots[" + std::to_string(t) + "] = " + std::to_string(slots[t]) +
                             " is outside the cache of " + std::to_string(B) + " x " + std::to_string(S) +
                             " tokens (expected 0 ... " + std::to_string(B * S - 1) + ", or negative to skip)");
    }
  }
  // One K/V head per work item, its tokens in order: a slot named twice
  // holds the later token, whatever the thread count.
  const std::size_t row = static_cast<std::size_t>(D) * dtype_size(dtype);
  const std::size_t es = dtype_size(dtype), cache_es = dtype_size(cache);
  const int n = threads > 0 ? threads : default_thread_count();
  const TensorView* news[2] = {&k_new, &v_new};
  const TensorView* caches[2] = {&k_cache, &v_cache};
  const TensorView* scale_views[2] = {&scales.k, &scales.v};
  const float* descales[2] = {scales.descale_k, scales.descale_v};
  const std::int64_t descale_counts[2] = {scales.descale_k_count, scales.descale_v_count};
  detail::ThreadPool::global().parallel_for(H, n, [&](std::int64_t h, int) {
    std::vector<float> x(quantize ? static_cast<std::size_t>(D) : 0);
    for (std::int64_t t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      const std::int64_t b = slots[t] / S, s = slots[t] % S;
      for (int kv = 0; kv < 2; ++kv) {
        char* dst = static_cast<char*>(caches[kv]->data) + caches[kv]->offset(b, h, s, 0) * cache_es;
        const char* src = static_cast<const char*>(news[kv]->data) + news[kv]->offset(0, h, t, 0) * es;
        if (!quantize) {
          std::memcpy(dst, src, row);
          continue;
        }
        for (std::int64_t d = 0; d < D; ++d) x[static_cast<std::size_t>(d)] = detail::load_as_f32(src, dtype, d);
        const float descale = descales[kv] ? descales[kv][descale_counts[kv] > 1 ? h : 0] : 1.0f;
        float* scale = cache == DType::kI8 ? static_cast<float*>(scale_views[kv]->data) + scale_views[kv]->offset(b, h, s, 0)
                                           : nullptr;
        float unused = 0.0f;
        quantize_row(x.data(), D, cache, descale, dst, scale ? scale : &unused);
      }
    }
  });
  return Status::Ok();
}

}  // namespace fa
