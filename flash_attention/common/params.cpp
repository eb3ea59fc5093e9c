// Parameter validation and the small helpers of the public API that do not
// depend on the algorithm version.
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <limits>
#include <string>
#include <thread>

#include "flash_attention/flash_attention.h"
#include "dropout.h"
#include "isa_names.h"
#include "thread_pool.h"
#include "mask.h"
#include "tensor_checks.h"
#include "tile_config.h"

namespace fa {

std::size_t dtype_size(DType dtype) {
  return dtype == DType::kF32 ? 4 : dtype == DType::kF16 || dtype == DType::kBF16 ? 2 : 1;
}

std::string_view dtype_name(DType dtype) { return detail::dtype_text(dtype); }

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32") return DType::kF32;
  if (name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "fp8_e4m3" || name == "float8_e4m3fn") return DType::kFP8E4M3;
  if (name == "fp8_e5m2" || name == "float8_e5m2") return DType::kFP8E5M2;
  if (name == "int8") return DType::kI8;
  return std::nullopt;
}

std::string_view layout_name(Layout layout) {
  switch (layout) {
    case Layout::kBSH: return "BSH";
    case Layout::kBSND: return "BSND";
    case Layout::kBNSD: return "BNSD";
    case Layout::kTND: return "TND";
  }
  return "?";
}

std::optional<Layout> parse_layout(std::string_view name) {
  if (name == "BSH" || name == "bsh") return Layout::kBSH;
  if (name == "BSND" || name == "bsnd") return Layout::kBSND;
  if (name == "BNSD" || name == "bnsd") return Layout::kBNSD;
  if (name == "TND" || name == "tnd") return Layout::kTND;
  return std::nullopt;
}

TensorView make_view(void* data, DType dtype, Layout layout, std::int64_t batch,
                     std::int64_t heads, std::int64_t seq, std::int64_t head_dim) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape[0] = batch;
  v.shape[1] = heads;
  v.shape[2] = seq;
  v.shape[3] = head_dim;
  // A stride whose product overflows is -1: validate refuses the view
  // ("strides must be non-negative and addressable") instead of it wrapping.
  auto times = [](std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    return a < 0 || __builtin_mul_overflow(a, b, &r) ? std::int64_t{-1} : r;
  };
  v.strides[3] = 1;
  if (layout == Layout::kBNSD) {
    v.strides[2] = head_dim;
    v.strides[1] = times(seq, head_dim);
    v.strides[0] = times(heads, v.strides[1]);
  } else {  // BSH, BSND and TND share their bytes
    v.strides[1] = head_dim;
    v.strides[2] = times(heads, head_dim);
    v.strides[0] = times(seq, v.strides[2]);
  }
  return v;
}

float AttentionParams::softmax_scale() const {
  if (scale) return *scale;
  return head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(head_dim)) : 1.0f;
}

int default_thread_count() { return detail::worker_cpu_count(); }

Status set_worker_cpus(const std::vector<int>& cpus) {
  if (!detail::set_worker_cpus(cpus)) {
    return Status::Invalid("set_worker_cpus: a CPU of the list is not one this process may run on");
  }
  return Status::Ok();
}

int default_tile_q() { return detail::kDefaultTileQ; }
int default_tile_kv() { return detail::kDefaultTileKv; }
bool mixed_precision_softmax() { return detail::kMixedPrecisionSoftmax; }
bool default_async_prefetch() { return detail::kAsyncPrefetch; }

namespace detail {

Dropout dropout_of(const AttentionParams& p) {
  Dropout d;
  if (p.keep_prob < 1.0f) {
    d.active = true;
    d.seed = p.dropout_seed;
    d.keep_threshold = static_cast<std::uint32_t>(std::min(4294967295.0, double(p.keep_prob) * 4294967296.0));
    d.scale = 1.0f / p.keep_prob;
  }
  return d;
}

AttentionParams sequence_params(const AttentionParams& p, std::int64_t b) {
  AttentionParams q = p;
  q.batch = 1;
  if (p.seqlens_kv) {
    q.seq_kv = p.seqlens_kv[b];
    if (p.block_table) q.block_table = p.block_table + b * p.max_blocks_per_seq;
  } else {
    q.seq_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    q.seq_kv = p.cu_seqlens_kv[b + 1] - p.cu_seqlens_kv[b];
  }
  q.cu_seqlens_q = q.cu_seqlens_kv = nullptr;
  q.seqlens_kv = nullptr;
  // Each sequence gets its own dropout pattern.
  q.dropout_seed = p.dropout_seed ^ ((static_cast<std::uint64_t>(b) + 1) * 0x9e3779b97f4a7c15ull);
  return q;
}

KeyWindow key_window(const AttentionParams& p) {
  KeyWindow w;
  const std::int64_t bottom_right = p.seq_kv - p.seq_q;
  const SparseMode mode = p.sparse_mode ? *p.sparse_mode : (p.causal ? SparseMode::kCausalBottomRight : SparseMode::kAll);
  switch (mode) {
    case SparseMode::kAll: break;
    case SparseMode::kCausalTopLeft: w = {true, 0, kUnboundedTokens, 0}; break;
    case SparseMode::kCausalBottomRight: w = {true, bottom_right, kUnboundedTokens, 0}; break;
    case SparseMode::kBand: w = {true, bottom_right, p.pre_tokens, p.next_tokens}; break;
    case SparseMode::kMaskAndBand:
      w = {p.pre_tokens < kUnboundedTokens || p.next_tokens < kUnboundedTokens, 0, p.pre_tokens, p.next_tokens};
      break;
  }
  return w;
}

}  // namespace detail

std::int64_t attended_pairs(const AttentionParams& p) {
  if (detail::per_sequence_call(p)) {
    std::int64_t n = 0;
    for (std::int64_t b = 0; b < p.batch; ++b) n += attended_pairs(detail::sequence_params(p, b));
    return n;
  }
  const detail::KeyWindow w = detail::key_window(p);
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    const std::int64_t begin = detail::window_begin(w, i, p.seq_kv), end = detail::window_end(w, i, p.seq_kv);
    if (!p.mask) {
      n += end > begin ? end - begin : 0;
      continue;
    }
    const std::int8_t* row = p.mask + i * p.seq_kv;
    for (std::int64_t j = begin; j < end; ++j) n += row[j] != 0;
  }
  return n;
}

namespace {

bool is_tile_size(int t) { return t >= 16 && t <= 512 && (t & (t - 1)) == 0; }

// Largest element offset a view can reach, or -1 if a stride is negative or
// the arithmetic would overflow.
std::int64_t max_offset(const TensorView& v) {
  std::int64_t total = 0;
  for (int a = 0; a < 4; ++a) {
    if (v.strides[a] < 0) return -1;
    if (v.shape[a] == 0) return 0;
    const std::int64_t span = v.shape[a] - 1;
    if (span > 0 && v.strides[a] > std::numeric_limits<std::int64_t>::max() / span) return -1;
    total += span * v.strides[a];
    if (total < 0) return -1;
  }
  return total;
}

}  // namespace

namespace detail {

Status check_view(const char* name, const TensorView& v, std::int64_t b, std::int64_t h,
                  std::int64_t s, std::int64_t d, DType dtype, const char* dtype_of) {
  if (v.data == nullptr) return Status::Invalid(std::string(name) + ": data pointer is null");
  const std::int64_t want[4] = {b, h, s, d};
  for (int a = 0; a < 4; ++a) {
    if (v.shape[a] != want[a]) {
      return Status::Invalid(std::string(name) + ": shape [" + std::to_string(v.shape[0]) + ", " +
                             std::to_string(v.shape[1]) + ", " + std::to_string(v.shape[2]) +
                             ", " + std::to_string(v.shape[3]) + "] does not match expected [" +
                             std::to_string(b) + ", " + std::to_string(h) + ", " +
                             std::to_string(s) + ", " + std::to_string(d) +
                             "] (batch, heads, seq, head_dim)");
    }
  }
  if (v.dtype != dtype) {
    return Status::Invalid(std::string(name) + ": dtype " + std::string(dtype_name(v.dtype)) +
                           " differs from " + dtype_of + "'s dtype " + std::string(dtype_name(dtype)));
  }
  if (v.strides[3] != 1) {
    return Status::Invalid(std::string(name) + ": head_dim stride must be 1 (got " +
                           std::to_string(v.strides[3]) + ")");
  }
  if (max_offset(v) < 0) {
    return Status::Invalid(std::string(name) + ": strides must be non-negative and addressable");
  }
  return Status::Ok();
}

Status check_scale_view(const char* name, const TensorView& v, std::int64_t b, std::int64_t h, std::int64_t s,
                        const std::string& missing) {
  if (!v.data) return Status::Invalid(std::string(name) + ": " + missing);
  if (v.dtype != DType::kF32) {
    return Status::Invalid(std::string(name) + ": dtype " + std::string(dtype_name(v.dtype)) + " (expected fp32)");
  }
  return check_view(name, v, b, h, s, 1, DType::kF32);
}

Status check_factors(const char* name, const float* values, std::int64_t count, std::int64_t heads, const char* per) {
  if (count != 1 && count != heads) {
    return Status::Invalid(std::string(name) + ": " + std::to_string(count) + " factors (expected 1, or one per " + per +
                           ": " + std::to_string(heads) + ")");
  }
  for (std::int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i]) || values[i] <= 0.0f) {
      return Status::Invalid(std::string(name) + "[" + std::to_string(i) + "] must be a finite positive number (got " +
                             std::to_string(values[i]) + ")");
    }
  }
  return Status::Ok();
}

// Every check of `p` that needs no tensor (validate's first part), shared
// with the planner so that neither ever computes with a bad shape.
Status validate_params(const AttentionParams& p) {
  auto positive = [](const char* what, std::int64_t value) -> Status {
    if (value <= 0) {
      return Status::Invalid(std::string(what) + " must be a positive integer (got " +
                             std::to_string(value) + ")");
    }
    return Status::Ok();
  };
  for (auto [what, value] : {std::pair<const char*, std::int64_t>{"batch", p.batch},
                             {"seq_q", p.seq_q},
                             {"seq_kv", p.seq_kv},
                             {"num_heads", p.num_heads},
                             {"head_dim", p.head_dim}}) {
    if (Status s = positive(what, value); !s.ok()) return s;
  }
  if (p.num_kv_heads < 0) {
    return Status::Invalid("num_kv_heads must be positive, or 0 for num_heads (got " +
                           std::to_string(p.num_kv_heads) + ")");
  }
  if (p.num_heads % p.kv_heads() != 0) {
    return Status::Invalid("num_heads (" + std::to_string(p.num_heads) +
                           ") must be divisible by num_kv_heads (" +
                           std::to_string(p.kv_heads()) + ")");
  }
  if (p.head_dim % 8 != 0 || p.head_dim > kMaxHeadDim) {
    return Status::Invalid("head_dim must be a multiple of 8 from 8 to " +
                           std::to_string(kMaxHeadDim) + " (got " + std::to_string(p.head_dim) +
                           ")");
  }
  // Sizes whose products the library forms (elements of Q, K, V and O, the
  // mask and bias rows, the LSE, split partials) must fit 62 bits: beyond,
  // no buffer could hold them and the arithmetic would wrap.
  {
    const std::int64_t kv_heads = p.kv_heads();
    const std::int64_t limit = std::int64_t{1} << 62;
    std::int64_t n = 1;
    for (const auto& factors : {std::vector<std::int64_t>{p.batch, p.num_heads, p.seq_q, p.head_dim + 1, kMaxSplits},
                                std::vector<std::int64_t>{p.batch, kv_heads, p.seq_kv, p.head_dim},
                                std::vector<std::int64_t>{p.num_heads, p.seq_q, p.seq_kv}}) {
      n = 1;
      for (std::int64_t x : factors) {
        if (__builtin_mul_overflow(n, x, &n) || n > limit) {
          return Status::Invalid("the shape is too large: batch " + std::to_string(p.batch) + ", heads " +
                                 std::to_string(p.num_heads) + ", seq_q " + std::to_string(p.seq_q) + ", seq_kv " +
                                 std::to_string(p.seq_kv) + ", head_dim " + std::to_string(p.head_dim) +
                                 " multiply past 2^62 elements");
        }
      }
    }
  }
  const float scale = p.softmax_scale();
  if (!std::isfinite(scale) || scale <= 0.0f) {
    return Status::Invalid("scale must be a finite positive number (got " + std::to_string(scale) +
                           ")");
  }
  if (p.threads < 0 || p.threads > kMaxThreads) {
    return Status::Invalid("threads must be 0 (all cores) or a count from 1 to " +
                           std::to_string(kMaxThreads) + " (got " +
                           std::to_string(p.threads) + ")");
  }
  for (auto [what, tile] : {std::pair<const char*, int>{"tile_q", p.tile_q}, {"tile_kv", p.tile_kv}}) {
    if (tile != 0 && tile != kTileAuto && !is_tile_size(tile)) {
      return Status::Invalid(std::string(what) +
                             " must be a power of two from 16 to 512, kTileAuto, or 0 for the default (got " +
                             std::to_string(tile) + ")");
    }
  }
  if (p.pre_tokens < 0 || p.next_tokens < 0) {
    return Status::Invalid("pre_tokens and next_tokens must be >= 0 (got " + std::to_string(p.pre_tokens) + " and " +
                           std::to_string(p.next_tokens) + ")");
  }
  if (p.sparse_mode && p.causal && *p.sparse_mode != SparseMode::kCausalBottomRight) {
    return Status::Invalid("causal and sparse_mode " + std::to_string(static_cast<int>(*p.sparse_mode)) +
                           " disagree: give one of them (causal is sparse_mode 3)");
  }
  if (p.sparse_mode && (static_cast<int>(*p.sparse_mode) < 0 || static_cast<int>(*p.sparse_mode) > 4)) {
    return Status::Invalid("sparse_mode must be 0, 1, 2, 3 or 4 (got " + std::to_string(static_cast<int>(*p.sparse_mode)) + ")");
  }
  if (p.sinks) {
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      if (!std::isfinite(p.sinks[h])) {
        return Status::Invalid("sinks[" + std::to_string(h) + "] must be finite (got " + std::to_string(p.sinks[h]) + ")");
      }
    }
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f) {
    return Status::Invalid("softcap must be 0 (off) or a positive finite number (got " + std::to_string(p.softcap) + ")");
  }
  if (!(p.keep_prob > 0.0f && p.keep_prob <= 1.0f)) {
    return Status::Invalid("keep_prob must be in (0, 1] (got " + std::to_string(p.keep_prob) + ")");
  }
  if (p.alibi_slopes) {
    for (std::int64_t h = 0; h < p.num_heads; ++h) {
      if (!std::isfinite(p.alibi_slopes[h])) {
        return Status::Invalid("alibi_slopes[" + std::to_string(h) + "] must be finite");
      }
    }
  }
  if (p.bias && p.bias_heads != 1 && p.bias_heads != p.num_heads) {
    return Status::Invalid("bias must have 1 or num_heads (" + std::to_string(p.num_heads) +
                           ") heads: [heads, seq_q, seq_kv] (got bias_heads " + std::to_string(p.bias_heads) + ")");
  }
  if (p.num_splits < kSplitsAuto || p.num_splits > kMaxSplits) {
    return Status::Invalid("num_splits must be 1 ... " + std::to_string(kMaxSplits) +
                           ", kSplitsAuto or 0 for the default (got " + std::to_string(p.num_splits) + ")");
  }
  const bool varlen = p.cu_seqlens_q || p.cu_seqlens_kv;
  if (p.seqlens_kv) {
    if (varlen) {
      return Status::Invalid("seqlens_kv does not combine with cu_seqlens (a variable-length call's key counts are "
                             "in cu_seqlens_kv)");
    }
    if (p.mask || p.bias) {
      return Status::Invalid("per-sequence key counts (seqlens_kv) do not combine with an explicit mask or a bias "
                             "tensor");
    }
    for (std::int64_t b = 0; b < p.batch; ++b) {
      if (p.seqlens_kv[b] < 0 || p.seqlens_kv[b] > p.seq_kv) {
        return Status::Invalid("seqlens_kv[" + std::to_string(b) + "] = " + std::to_string(p.seqlens_kv[b]) +
                               " is outside the cache (expected 0 ... seq_kv = " + std::to_string(p.seq_kv) + ")");
      }
    }
  }
  if (p.block_table) {
    if (varlen) return Status::Invalid("a paged KV cache (block_table) does not combine with cu_seqlens");
    const std::int64_t bs = p.block_size;
    if (bs < 16 || bs > 512 || (bs & (bs - 1)) != 0) {
      return Status::Invalid("block_size must be a power of two from 16 to 512 (got " + std::to_string(bs) + ")");
    }
    if (p.kv_num_blocks <= 0 || p.kv_num_blocks > (std::int64_t{1} << 40) / bs) {
      return Status::Invalid("kv_num_blocks must be a positive integer whose tokens fit in 2^40 (got " +
                             std::to_string(p.kv_num_blocks) + ")");
    }
    const std::int64_t needed = (p.seq_kv + bs - 1) / bs;
    if (p.max_blocks_per_seq < needed) {
      return Status::Invalid("block_table: seq_kv = " + std::to_string(p.seq_kv) + " keys need " + std::to_string(needed) +
                             " blocks of " + std::to_string(bs) + " per sequence, but max_blocks_per_seq is " +
                             std::to_string(p.max_blocks_per_seq));
    }
    for (std::int64_t b = 0; b < p.batch; ++b) {  // the blocks each sequence reads
      const std::int64_t used = p.seqlens_kv ? (p.seqlens_kv[b] + bs - 1) / bs : needed;
      for (std::int64_t n = 0; n < used; ++n) {
        const std::int32_t block = p.block_table[b * p.max_blocks_per_seq + n];
        if (block < 0 || block >= p.kv_num_blocks) {
          return Status::Invalid("block_table[" + std::to_string(b) + "][" + std::to_string(n) + "] = " +
                                 std::to_string(block) + " is outside the pool of " + std::to_string(p.kv_num_blocks) +
                                 " blocks (expected 0 ... " + std::to_string(p.kv_num_blocks - 1) + ")");
        }
      }
    }
  }
  if (varlen) {
    if (!p.cu_seqlens_q || !p.cu_seqlens_kv) {
      return Status::Invalid("cu_seqlens_q and cu_seqlens_kv must be given together");
    }
    if (p.mask || p.bias) {
      return Status::Invalid("variable-length sequences (cu_seqlens) do not combine with an explicit mask or a bias "
                             "tensor");
    }
    for (const auto& [name, cu, total] : {std::tuple{"cu_seqlens_q", p.cu_seqlens_q, p.seq_q},
                                          std::tuple{"cu_seqlens_kv", p.cu_seqlens_kv, p.seq_kv}}) {
      if (cu[0] != 0) return Status::Invalid(std::string(name) + "[0] must be 0 (got " + std::to_string(cu[0]) + ")");
      for (std::int64_t b = 0; b < p.batch; ++b) {
        if (cu[b + 1] < cu[b]) {
          return Status::Invalid(std::string(name) + " must not decrease (entry " + std::to_string(b + 1) + ": " +
                                 std::to_string(cu[b + 1]) + " < " + std::to_string(cu[b]) + ")");
        }
      }
      if (cu[p.batch] != total) {
        return Status::Invalid(std::string(name) + "[batch] = " + std::to_string(cu[p.batch]) +
                               " does not match the tensors' " + std::to_string(total) + " tokens");
      }
    }
  }
  return Status::Ok();
}

}  // namespace detail

namespace {

// K and V of a quantized cache (int8 or FP8 with fp16 or bf16 Q), or the
// scale views given where they do not apply.
Status check_quantized_kv(const AttentionParams& p, const AttentionTensors& t, std::int64_t kv_batch,
                          std::int64_t kv_seq) {
  const DType dt = t.q.dtype, kvt = t.k.dtype;
  const bool int8 = kvt == DType::kI8 && kvt != dt;
  if (kvt != dt) {
    if (!is_quantized_kv(kvt) || (dt != DType::kF16 && dt != DType::kBF16)) {
      return Status::Invalid("K: dtype " + std::string(dtype_name(kvt)) + " differs from Q's dtype " +
                             std::string(dtype_name(dt)) + " (a quantized K/V cache is int8, fp8_e4m3 or fp8_e5m2 "
                             "read with fp16 or bf16 Q)");
    }
  }
  for (const auto& [name, view] : {std::pair{"k_scale", &t.k_scale}, std::pair{"v_scale", &t.v_scale}}) {
    if (!int8) {
      if (view->data) {
        return Status::Invalid(std::string(name) + " applies to int8 K/V caches only (K/V are " +
                               std::string(dtype_name(kvt)) + ")");
      }
      continue;
    }
    if (Status s = detail::check_scale_view(name, *view, kv_batch, p.kv_heads(), kv_seq,
                                            "an int8 K/V cache needs its scales (fp32 [batch, kv_heads, seq_kv, 1])");
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

}  // namespace

Status validate(const AttentionParams& p, const AttentionTensors& t) {
  if (Status s = detail::validate_params(p); !s.ok()) return s;
  const bool varlen = p.cu_seqlens_q || p.cu_seqlens_kv;
  const std::int64_t view_batch = varlen ? 1 : p.batch;
  const DType dt = t.q.dtype;
  if (Status s = detail::check_view("Q", t.q, view_batch, p.num_heads, p.seq_q, p.head_dim, dt); !s.ok()) return s;
  // A paged cache's K and V are its pools: one sequence of all blocks' tokens.
  const std::int64_t kv_batch = p.block_table ? 1 : view_batch;
  const std::int64_t kv_seq = p.block_table ? p.kv_num_blocks * p.block_size : p.seq_kv;
  if (dt == DType::kI8) {
    return Status::Invalid("Q: int8 is a K/V cache dtype (with fp16 or bf16 Q), not an input dtype");
  }
  if (Status s = check_quantized_kv(p, t, kv_batch, kv_seq); !s.ok()) return s;
  const DType kvt = t.k.dtype;
  if (Status s = detail::check_view("K", t.k, kv_batch, p.kv_heads(), kv_seq, p.head_dim, kvt); !s.ok()) return s;
  if (Status s = detail::check_view("V", t.v, kv_batch, p.kv_heads(), kv_seq, p.head_dim, kvt, "K"); !s.ok()) return s;
  // FP8 inputs write a wider output; every other dtype writes its own.
  if (is_fp8(dt) && is_fp8(t.o.dtype)) {
    return Status::Invalid("O: dtype " + std::string(dtype_name(t.o.dtype)) + " is not an output dtype for " +
                           std::string(dtype_name(dt)) + " inputs (expected fp32, fp16 or bf16)");
  }
  const DType out = is_fp8(dt) ? t.o.dtype : dt;
  if (Status s = detail::check_view("O", t.o, view_batch, p.num_heads, p.seq_q, p.head_dim, out); !s.ok()) return s;
  for (const auto& [name, values, count, heads] :
       {std::tuple{"descale_q", p.descale_q, p.descale_q_count, p.num_heads},
        std::tuple{"descale_k", p.descale_k, p.descale_k_count, p.kv_heads()},
        std::tuple{"descale_v", p.descale_v, p.descale_v_count, p.kv_heads()}}) {
    if (!values) continue;
    const bool of_q = std::string_view(name) == "descale_q";  // descale_k and _v are K's and V's
    const DType of = of_q ? dt : kvt;
    if (!is_fp8(of)) {
      return Status::Invalid(std::string(name) + " applies to FP8 tensors only (" + (of_q ? "Q is " : "K/V are ") +
                             std::string(dtype_name(of)) + ")");
    }
    if (Status s = detail::check_factors(name, values, count, heads, "head"); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace fa
