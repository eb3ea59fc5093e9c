#include "quantized_cache.h"

#include <cmath>

#include "../../flash_attention/common/dtype_convert.h"

namespace fa::cli {

void QuantizedCache::bind(AttentionParams& p, AttentionTensors& t) const {
  t.k = k_view;
  t.v = v_view;
  t.k_scale = k_scale_view;
  t.v_scale = v_scale_view;
  if (!descale_k.empty()) {
    p.descale_k = descale_k.data();
    p.descale_v = descale_v.data();
    p.descale_k_count = p.descale_v_count = static_cast<std::int64_t>(descale_k.size());
  }
}

KvCacheScales append_scales(const AttentionParams& p, const AttentionTensors& t) {
  KvCacheScales scales;
  scales.k = t.k_scale;
  scales.v = t.v_scale;
  scales.descale_k = p.descale_k;
  scales.descale_v = p.descale_v;
  scales.descale_k_count = p.descale_k_count;
  scales.descale_v_count = p.descale_v_count;
  return scales;
}

namespace {

// Largest finite magnitude of each head of `view` (0 when none).
std::vector<float> head_absmax(const TensorView& view) {
  std::vector<float> amax(static_cast<std::size_t>(view.shape[1]), 0.0f);
  for (std::int64_t b = 0; b < view.shape[0]; ++b) {
    for (std::int64_t h = 0; h < view.shape[1]; ++h) {
      for (std::int64_t j = 0; j < view.shape[2]; ++j) {
        for (std::int64_t d = 0; d < view.shape[3]; ++d) {
          const float x = std::fabs(detail::load_as_f32(view.data, view.dtype, view.offset(b, h, j, d)));
          if (std::isfinite(x) && x > amax[static_cast<std::size_t>(h)]) amax[static_cast<std::size_t>(h)] = x;
        }
      }
    }
  }
  return amax;
}

}  // namespace

Status quantize_cache(const TensorView& k, const TensorView& v, Layout layout, DType kv_dtype, QuantizedCache* out) {
  const std::int64_t B = k.shape[0], H = k.shape[1], S = k.shape[2], D = k.shape[3];
  const std::size_t elems = static_cast<std::size_t>(B * H * S * D);
  out->k = HostBuffer(elems * dtype_size(kv_dtype));
  out->v = HostBuffer(elems * dtype_size(kv_dtype));
  out->k_view = make_view(out->k.data(), kv_dtype, layout, B, H, S, D);
  out->v_view = make_view(out->v.data(), kv_dtype, layout, B, H, S, D);
  KvCacheScales scales;
  if (kv_dtype == DType::kI8) {
    out->k_scale = HostBuffer(static_cast<std::size_t>(B * H * S) * sizeof(float));
    out->v_scale = HostBuffer(static_cast<std::size_t>(B * H * S) * sizeof(float));
    out->k_scale_view = make_view(out->k_scale.data(), DType::kF32, layout, B, H, S, 1);
    out->v_scale_view = make_view(out->v_scale.data(), DType::kF32, layout, B, H, S, 1);
    scales.k = out->k_scale_view;
    scales.v = out->v_scale_view;
  } else if (is_fp8(kv_dtype)) {
    const float top = kv_dtype == DType::kFP8E4M3 ? 448.0f : 57344.0f;
    for (auto [view, descale] : {std::pair{&k, &out->descale_k}, std::pair{&v, &out->descale_v}}) {
      descale->clear();
      for (float a : head_absmax(*view)) descale->push_back(a > 0.0f ? a / top : 1.0f);
    }
    scales.descale_k = out->descale_k.data();
    scales.descale_v = out->descale_v.data();
    scales.descale_k_count = scales.descale_v_count = H;
  }
  // Batch entry b's tokens into its slots b * S + j, one append per entry
  // (any layout: an entry is a [1, heads, seq, head_dim] view).
  std::vector<std::int64_t> slots(static_cast<std::size_t>(S));
  for (std::int64_t b = 0; b < B; ++b) {
    TensorView kb = k, vb = v;
    kb.data = static_cast<char*>(k.data) + b * k.strides[0] * static_cast<std::int64_t>(dtype_size(k.dtype));
    vb.data = static_cast<char*>(v.data) + b * v.strides[0] * static_cast<std::int64_t>(dtype_size(v.dtype));
    kb.shape[0] = vb.shape[0] = 1;
    for (std::int64_t j = 0; j < S; ++j) slots[static_cast<std::size_t>(j)] = b * S + j;
    if (Status s = append_kv_cache(kb, vb, slots.data(), out->k_view, out->v_view, scales); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace fa::cli
