// libFuzzer harness: the public API's validation and the calls behind it.
// Random AttentionParams (sizes up to overflowing 64 bits, negative ones,
// NaN and Inf scales, bad enum values, masks, biases, sinks, ALiBi slopes,
// cu_seqlens lists, per-sequence key counts, paged-cache block tables,
// descale factors of any count) and tensor views (any
// dtype, layout or random strides, null data, mismatched shapes) go to
// validate, version_supports, plan for every version and workspace_bytes;
// when validate accepts and the tensors are small, to fa2_forward on real
// buffers of the views' extents.  Contract: every problem comes back as a
// Status with a one-line message; nothing aborts, reads out of bounds or hits
// undefined behaviour (ASan, UBSan).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "flash_attention/flash_attention.h"

namespace {

constexpr std::int64_t kMaxElements = std::int64_t{1} << 18;  // per tensor the harness allocates

void check(const fa::Status& s) {
  if (!s.ok() && (s.message().empty() || s.message().find('\n') != std::string::npos)) std::abort();
}

std::int64_t size_value(FuzzedDataProvider& f, std::int64_t small_max) {
  switch (f.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: return f.ConsumeIntegral<std::int64_t>();  // anything: negative, huge, overflowing products
    case 1: return -f.ConsumeIntegralInRange<std::int64_t>(0, 2);
    default: return f.ConsumeIntegralInRange<std::int64_t>(1, small_max);
  }
}

float float_value(FuzzedDataProvider& f) {
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return -std::numeric_limits<float>::infinity();
    case 3: return 0.0f;
    case 4: return -1.0f;
    case 5: return f.ConsumeFloatingPoint<float>();
    default: return f.ConsumeFloatingPointInRange<float>(0.01f, 4.0f);
  }
}

template <class T>
T enum_value(FuzzedDataProvider& f, int valid_count) {
  // Mostly a valid value; now and then one past them (a caller's cast).
  return static_cast<T>(f.ConsumeIntegralInRange<int>(0, valid_count));
}

// A tensor: its view, and the buffer behind it when the view's extent is
// small enough to allocate (`safe`: every offset the view can reach is in it).
struct Tensor {
  fa::TensorView view;
  std::vector<unsigned char> buffer;
  bool safe = false;
};

std::int64_t extent(const fa::TensorView& v) {  // elements the view spans; -1 when huge or ill-formed
  std::int64_t total = 1;
  for (int a = 0; a < 4; ++a) {
    if (v.shape[a] <= 0) return v.shape[a] == 0 ? 0 : -1;
    if (v.strides[a] < 0) return -1;
    std::int64_t span = 0;
    if (__builtin_mul_overflow(v.shape[a] - 1, v.strides[a], &span) || __builtin_add_overflow(total, span, &total)) {
      return -1;
    }
  }
  return total;
}

Tensor make_tensor(FuzzedDataProvider& f, fa::DType dtype, std::int64_t b, std::int64_t h, std::int64_t s,
                   std::int64_t d) {
  Tensor t;
  const int mode = f.ConsumeIntegralInRange<int>(0, 9);
  if (mode <= 5) {
    t.view = fa::make_view(nullptr, dtype, enum_value<fa::Layout>(f, 3), b, h, s, d);
  } else {
    t.view.dtype = dtype;
    const std::int64_t shape[4] = {b, h, s, d};
    for (int a = 0; a < 4; ++a) {
      t.view.shape[a] = mode == 9 && f.ConsumeBool() ? size_value(f, 70) : shape[a];
      t.view.strides[a] = f.ConsumeIntegralInRange<std::int64_t>(-1, 300);
    }
  }
  const std::int64_t n = extent(t.view);
  const std::int64_t bytes_per = static_cast<std::int64_t>(fa::dtype_size(dtype));
  if (n >= 0 && n <= kMaxElements && f.ConsumeIntegralInRange<int>(0, 15) != 0) {
    t.buffer.assign(static_cast<std::size_t>(std::max<std::int64_t>(n, 1) * bytes_per), 0);
    for (std::int64_t i = 0; i < n; ++i) {
      fa::detail::store_from_f32(t.buffer.data(), dtype, i, static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f);
    }
    t.view.data = t.buffer.data();
    t.safe = true;
  } else if (f.ConsumeBool()) {
    t.buffer.assign(16, 0);  // a pointer with too little behind it: validate must not be fooled into a call
    t.view.data = t.buffer.data();
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider f(data, size);
  fa::AttentionParams p;
  p.batch = size_value(f, 3);
  p.seq_q = size_value(f, 70);
  p.seq_kv = f.ConsumeBool() ? p.seq_q : size_value(f, 90);
  p.num_heads = size_value(f, 6);
  p.num_kv_heads = f.ConsumeBool() ? 0 : size_value(f, 6);
  p.head_dim = f.ConsumeBool() ? 8 * f.ConsumeIntegralInRange<std::int64_t>(1, 8) : size_value(f, 300);
  if (f.ConsumeBool()) p.scale = float_value(f);
  p.causal = f.ConsumeBool();
  if (f.ConsumeBool()) p.sparse_mode = enum_value<fa::SparseMode>(f, 5);
  if (f.ConsumeBool()) p.pre_tokens = f.ConsumeIntegralInRange<std::int64_t>(-2, 100);
  if (f.ConsumeBool()) p.next_tokens = f.ConsumeIntegralInRange<std::int64_t>(-2, 100);
  if (f.ConsumeBool()) p.softcap = float_value(f);
  if (f.ConsumeBool()) p.keep_prob = float_value(f);
  p.dropout_seed = f.ConsumeIntegral<std::uint64_t>();
  p.threads = f.ConsumeIntegralInRange<int>(-2, 4);
  if (f.ConsumeIntegralInRange<int>(0, 20) == 0) p.threads = fa::kMaxThreads + 1;
  const int tiles[] = {0, fa::kTileAuto, 16, 32, 64, 128, 256, 512, 100, -7, 1024};
  p.tile_q = tiles[f.ConsumeIntegralInRange<int>(0, 10)];
  p.tile_kv = tiles[f.ConsumeIntegralInRange<int>(0, 10)];
  p.num_splits = f.ConsumeIntegralInRange<int>(-3, 9);
  if (f.ConsumeBool()) p.isa = enum_value<fa::Isa>(f, 5);
  if (f.ConsumeBool()) p.async_prefetch = f.ConsumeBool();

  // Per-head and per-row arrays, sized as the params say when that is small
  // (the caller's part of the contract); else left out.
  const bool small_heads = p.num_heads > 0 && p.num_heads <= 64;
  std::vector<float> sinks, slopes, bias, descale[3];
  std::vector<std::int8_t> mask;
  std::vector<std::int32_t> cu_q, cu_kv;
  if (small_heads && f.ConsumeBool()) {
    for (std::int64_t h = 0; h < p.num_heads; ++h) sinks.push_back(float_value(f));
    p.sinks = sinks.data();
  }
  if (small_heads && f.ConsumeBool()) {
    for (std::int64_t h = 0; h < p.num_heads; ++h) slopes.push_back(float_value(f));
    p.alibi_slopes = slopes.data();
  }
  const bool small_rows = p.seq_q > 0 && p.seq_kv > 0 && p.seq_q <= 128 && p.seq_kv <= 128;
  if (small_rows && f.ConsumeBool()) {
    mask.resize(static_cast<std::size_t>(p.seq_q * p.seq_kv));
    for (auto& m : mask) m = f.ConsumeIntegral<std::int8_t>();
    p.mask = mask.data();
  }
  if (small_rows && small_heads && f.ConsumeBool()) {
    p.bias_heads = f.ConsumeBool() ? 1 : f.ConsumeIntegralInRange<std::int64_t>(0, p.num_heads + 1);
    if (p.bias_heads > 0) {
      bias.resize(static_cast<std::size_t>(p.bias_heads * p.seq_q * p.seq_kv));
      for (auto& x : bias) x = f.ConsumeIntegralInRange<int>(0, 30) == 0 ? float_value(f) : 0.5f;
      p.bias = bias.data();
    }
  }
  if (p.batch > 0 && p.batch <= 64 && f.ConsumeBool()) {
    std::int32_t q = 0, kv = 0;
    cu_q.push_back(f.ConsumeIntegralInRange<int>(0, 20) == 0 ? 1 : 0);
    cu_kv.push_back(0);
    for (std::int64_t b = 0; b < p.batch; ++b) {
      q += f.ConsumeIntegralInRange<std::int32_t>(f.ConsumeIntegralInRange<int>(0, 20) == 0 ? -5 : 0, 40);
      kv += f.ConsumeIntegralInRange<std::int32_t>(0, 50);
      cu_q.push_back(q);
      cu_kv.push_back(kv);
    }
    if (f.ConsumeBool()) {  // totals that match, mostly
      p.seq_q = cu_q.back();
      p.seq_kv = cu_kv.back();
    }
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_kv = f.ConsumeIntegralInRange<int>(0, 20) == 0 ? nullptr : cu_kv.data();
  }
  // A KV cache's per-sequence key counts (in range, mostly) and a paged
  // cache: a block size (valid or not), a table whose entries may point
  // outside the pool, and a pool view that may not hold every block.
  std::vector<std::int32_t> seqlens, table;
  if (p.batch > 0 && p.batch <= 64 && f.ConsumeBool()) {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      seqlens.push_back(f.ConsumeIntegralInRange<int>(0, 20) == 0
                            ? f.ConsumeIntegralInRange<std::int32_t>(-3, 1000)
                            : static_cast<std::int32_t>(f.ConsumeIntegralInRange<std::int64_t>(0, std::min<std::int64_t>(
                                                                                                     p.seq_kv > 0 ? p.seq_kv : 0, 1000))));
    }
    p.seqlens_kv = seqlens.data();
  }
  std::int64_t pool_tokens = -1;
  if (p.batch > 0 && p.batch <= 64 && f.ConsumeBool()) {
    const std::int64_t sizes[] = {16, 32, 64, 24, 8, 1024, 0};
    p.block_size = sizes[f.ConsumeIntegralInRange<int>(0, 6)];
    p.max_blocks_per_seq = f.ConsumeIntegralInRange<std::int64_t>(-1, 8);
    p.kv_num_blocks = f.ConsumeIntegralInRange<std::int64_t>(-1, 12);
    const std::int64_t entries = p.batch * std::max<std::int64_t>(p.max_blocks_per_seq, 0);
    for (std::int64_t i = 0; i < entries; ++i) {
      table.push_back(f.ConsumeIntegralInRange<int>(0, 20) == 0 ? f.ConsumeIntegralInRange<std::int32_t>(-2, 40)
                                                                 : f.ConsumeIntegralInRange<std::int32_t>(
                                                                       0, static_cast<std::int32_t>(std::max<std::int64_t>(p.kv_num_blocks - 1, 0))));
    }
    p.block_table = table.empty() ? nullptr : table.data();
    pool_tokens = f.ConsumeIntegralInRange<int>(0, 10) == 0 ? f.ConsumeIntegralInRange<std::int64_t>(0, 300)
                                                            : std::max<std::int64_t>(p.kv_num_blocks, 0) * p.block_size;
  }
  const fa::DType dtype = enum_value<fa::DType>(f, 4);
  if (small_heads && f.ConsumeBool()) {
    const float* const* targets[3] = {&p.descale_q, &p.descale_k, &p.descale_v};
    std::int64_t* counts[3] = {&p.descale_q_count, &p.descale_k_count, &p.descale_v_count};
    for (int i = 0; i < 3; ++i) {
      if (!f.ConsumeBool()) continue;
      const std::int64_t n = f.ConsumeIntegralInRange<std::int64_t>(0, p.num_heads + 1);
      for (std::int64_t k = 0; k < n; ++k) descale[i].push_back(float_value(f));
      *const_cast<const float**>(targets[i]) = descale[i].empty() ? nullptr : descale[i].data();
      *counts[i] = n;
    }
  }

  const bool varlen = p.cu_seqlens_q != nullptr;
  const std::int64_t view_batch = varlen ? 1 : p.batch, kv_heads = p.num_kv_heads > 0 ? p.num_kv_heads : p.num_heads;
  Tensor q = make_tensor(f, dtype, view_batch, p.num_heads, p.seq_q, p.head_dim);
  const std::int64_t kv_batch = pool_tokens >= 0 ? 1 : view_batch, kv_seq = pool_tokens >= 0 ? pool_tokens : p.seq_kv;
  Tensor k = make_tensor(f, dtype, kv_batch, kv_heads, kv_seq, p.head_dim);
  Tensor v = make_tensor(f, dtype, kv_batch, kv_heads, kv_seq, p.head_dim);
  const fa::DType out = fa::is_fp8(dtype) ? enum_value<fa::DType>(f, 4) : dtype;
  Tensor o = make_tensor(f, out, view_batch, p.num_heads, p.seq_q, p.head_dim);
  std::vector<float> lse;
  fa::AttentionTensors t{q.view, k.view, v.view, o.view, nullptr};
  const bool safe_lse = p.num_heads > 0 && p.seq_q > 0 && view_batch > 0 && p.num_heads <= kMaxElements &&
                        p.seq_q <= kMaxElements && view_batch <= kMaxElements &&
                        view_batch * p.num_heads <= kMaxElements / p.seq_q;
  if (safe_lse && f.ConsumeBool()) {
    lse.resize(static_cast<std::size_t>(view_batch * p.num_heads * p.seq_q));
    t.lse = lse.data();
  }

  const fa::Status valid = fa::validate(p, t);
  check(valid);
  for (fa::Version version : {fa::Version::kFA1, fa::Version::kFA2, fa::Version::kFA3}) {
    check(fa::version_supports(version, p, dtype));
    fa::TilePlan plan;
    check(fa::plan(version, p, dtype, &plan));
  }
  (void)fa::fa2_workspace_bytes(p, dtype, p.threads);
  const bool small_call = q.safe && k.safe && v.safe && o.safe && (t.lse == nullptr || safe_lse);
  if (valid.ok() && small_call) check(fa::fa2_forward(p, t));
  return 0;
}
