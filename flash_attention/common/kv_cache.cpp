// Appending new tokens' keys and values to a KV cache (vLLM's
// reshape_and_cache): one row copy per (token, K/V head), to the slot the
// caller names, in a contiguous cache or a paged pool alike.
#include <cstring>
#include <string>

#include "flash_attention/flash_attention.h"
#include "tensor_checks.h"
#include "thread_pool.h"

namespace fa {

Status append_kv_cache(const TensorView& k_new, const TensorView& v_new, const std::int64_t* slots,
                       const TensorView& k_cache, const TensorView& v_cache, int threads) {
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
  if (Status s = detail::check_view("k_cache", k_cache, B, H, S, D, dtype, "k_new"); !s.ok()) return s;
  if (Status s = detail::check_view("v_cache", v_cache, B, H, S, D, dtype, "k_new"); !s.ok()) return s;
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
  const std::size_t es = dtype_size(dtype);
  const int n = threads > 0 ? threads : default_thread_count();
  detail::ThreadPool::global().parallel_for(H, n, [&](std::int64_t h, int) {
    for (std::int64_t t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      const std::int64_t b = slots[t] / S, s = slots[t] % S;
      std::memcpy(static_cast<char*>(k_cache.data) + k_cache.offset(b, h, s, 0) * es,
                  static_cast<const char*>(k_new.data) + k_new.offset(0, h, t, 0) * es, row);
      std::memcpy(static_cast<char*>(v_cache.data) + v_cache.offset(b, h, s, 0) * es,
                  static_cast<const char*>(v_new.data) + v_new.offset(0, h, t, 0) * es, row);
    }
  });
  return Status::Ok();
}

}  // namespace fa
