// Float64 reference: the textbook softmax(scale * Q Kᵀ) V, one (batch, head)
// at a time, with a full score row in memory.  Slow and simple on purpose: it
// is what every kernel is checked against.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dropout.h"
#include "dtype_convert.h"
#include "flash_attention/flash_attention.h"
#include "mask.h"
#include "thread_pool.h"

namespace fa {
namespace detail {

// A float64 dot product in four running sums: one sum's chain of dependent
// additions made the reference's scores cost four times what the multiplies
// do, and the test suites compute a reference for every case they run (the
// order of float64 sums moves a result by about 1e-16, far below any bound
// the kernels are checked against).
static double dot_f64(const double* a, const double* b, std::int64_t n) {
  double sum[4] = {0.0, 0.0, 0.0, 0.0};
  std::int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    for (int u = 0; u < 4; ++u) sum[u] += a[d + u] * b[d + u];
  }
  for (; d < n; ++d) sum[0] += a[d] * b[d];
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// The score modifiers of AttentionParams applied to a scaled score, in float64.
double modified_score(const AttentionParams& p, double s, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (p.softcap > 0.0f) s = double(p.softcap) * std::tanh(s / double(p.softcap));
  if (p.alibi_slopes) s -= double(p.alibi_slopes[h]) * double(std::llabs(i + p.seq_kv - p.seq_q - j));
  if (p.bias) s += double(p.bias[((p.bias_heads > 1 ? h : 0) * p.seq_q + i) * p.seq_kv + j]);
  return s;
}

// The checks every host-side attention (reference, same-dtype yardstick)
// makes before computing into `out` (doubles in the BSH order): the call is
// validated against a stand-in O view of `out`, since O itself is not
// written; the output of a call with per-sequence lengths starts at zero
// (sequences without keys keep it).  `checked` receives the tensors with that O view.
Status check_host_call(const AttentionParams& p, const AttentionTensors& t, double* out, const char* who,
                       AttentionTensors* checked) {
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  *checked = t;
  // (FP8 inputs write a wider dtype: fp32 stands in.)
  checked->o = make_view(out, is_fp8(t.q.dtype) ? DType::kF32 : t.q.dtype, Layout::kBSH, varlen ? 1 : p.batch,
                         p.num_heads, p.seq_q, p.head_dim);
  if (Status s = validate(p, *checked); !s.ok()) return s;
  if (out == nullptr) return Status::Invalid(std::string(who) + ": output pointer is null");
  if (per_sequence_call(p)) {  // sequences without keys are skipped
    const std::int64_t n = (varlen ? 1 : p.batch) * p.seq_q * p.num_heads * p.head_dim;
    for (std::int64_t i = 0; i < n; ++i) out[i] = 0.0;
  }
  return Status::Ok();
}

// A paged call as an ordinary one: each sequence's keys gathered from the
// pools through the block table into contiguous [batch, kv_heads, seq_kv,
// head_dim] K and V (held by `storage`; with seqlens_kv only each sequence's
// own keys, the rest zero), and the params without the table.
struct Unpaged {
  AttentionParams params;
  AttentionTensors tensors;
  std::vector<char> storage;
};
Unpaged unpage(const AttentionParams& p, const AttentionTensors& t) {
  Unpaged u{p, t, {}};
  const std::int64_t B = p.batch, Hkv = p.kv_heads(), S = p.seq_kv, D = p.head_dim, bs = p.block_size;
  const std::size_t es = dtype_size(t.k.dtype), one = static_cast<std::size_t>(B * Hkv * S * D) * es;
  // An int8 cache's scales come along, [batch, kv_heads, seq_kv, 1] each.
  const bool scaled = t.k_scale.data != nullptr;
  const std::size_t scale_one = scaled ? static_cast<std::size_t>(B * Hkv * S) * sizeof(float) : 0;
  u.storage.assign(2 * one + 2 * scale_one, 0);
  char* dst[4] = {u.storage.data(), u.storage.data() + one, u.storage.data() + 2 * one,
                  u.storage.data() + 2 * one + scale_one};
  const TensorView* src[4] = {&t.k, &t.v, &t.k_scale, &t.v_scale};
  for (int kv = 0; kv < (scaled ? 4 : 2); ++kv) {
    const std::int64_t width = kv < 2 ? D : 1;
    const std::size_t size = kv < 2 ? es : sizeof(float);
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < Hkv; ++h) {
        const std::int64_t keys = p.seqlens_kv ? p.seqlens_kv[b] : S;
        for (std::int64_t j = 0; j < keys; ++j) {
          const std::int64_t token = std::int64_t(p.block_table[b * p.max_blocks_per_seq + j / bs]) * bs + j % bs;
          for (std::int64_t d = 0; d < width; ++d) {
            std::memcpy(dst[kv] + (((b * Hkv + h) * S + j) * width + d) * size,
                        static_cast<const char*>(src[kv]->data) + src[kv]->offset(0, h, token, d) * size, size);
          }
        }
      }
    }
  }
  u.params.block_table = nullptr;
  u.params.max_blocks_per_seq = u.params.block_size = u.params.kv_num_blocks = 0;
  u.tensors.k = make_view(dst[0], t.k.dtype, Layout::kBNSD, B, Hkv, S, D);
  u.tensors.v = make_view(dst[1], t.v.dtype, Layout::kBNSD, B, Hkv, S, D);
  if (scaled) {
    u.tensors.k_scale = make_view(dst[2], DType::kF32, Layout::kBNSD, B, Hkv, S, 1);
    u.tensors.v_scale = make_view(dst[3], DType::kF32, Layout::kBNSD, B, Hkv, S, 1);
  }
  return u;
}

// Runs `fn(sequence params, tensors of the sequence, first output row)` for
// each sequence of a call with per-sequence lengths, each an ordinary call
// of batch 1: variable-length calls view the packed tensors at the
// sequence's tokens (its first output row is its first query token);
// seqlens_kv calls view batch entry b, cut to its keys (first output row
// b * seq_q).  Sequences without queries or keys are skipped: the caller's
// defaults stand.
template <class Fn>
Status for_each_sequence(const AttentionParams& p, const AttentionTensors& t, Fn&& fn) {
  const std::size_t es = dtype_size(t.q.dtype), kv_es = dtype_size(t.k.dtype);
  // An int8 cache's scale views follow their K and V (`at` keys or batch entries on).
  auto move_scales = [](AttentionTensors& st, std::int64_t at, int axis) {
    for (TensorView* scale : {&st.k_scale, &st.v_scale}) {
      if (scale->data) scale->data = static_cast<float*>(scale->data) + at * scale->strides[axis];
    }
  };
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const AttentionParams sp = sequence_params(p, b);
    AttentionTensors st = t;
    std::int64_t row0 = b * p.seq_q;
    if (p.seqlens_kv) {
      st.q.data = static_cast<char*>(t.q.data) + b * t.q.strides[0] * es;
      st.k.data = static_cast<char*>(t.k.data) + b * t.k.strides[0] * kv_es;
      st.v.data = static_cast<char*>(t.v.data) + b * t.v.strides[0] * kv_es;
      move_scales(st, b, 0);
      st.q.shape[0] = st.k.shape[0] = st.v.shape[0] = st.o.shape[0] = st.k_scale.shape[0] = st.v_scale.shape[0] = 1;
    } else {
      row0 = p.cu_seqlens_q[b];
      const std::int64_t k0 = p.cu_seqlens_kv[b];
      st.q.data = static_cast<char*>(t.q.data) + row0 * t.q.strides[2] * es;
      st.k.data = static_cast<char*>(t.k.data) + k0 * t.k.strides[2] * kv_es;
      st.v.data = static_cast<char*>(t.v.data) + k0 * t.v.strides[2] * kv_es;
      move_scales(st, k0, 2);
    }
    st.q.shape[2] = sp.seq_q;
    st.k.shape[2] = st.v.shape[2] = st.k_scale.shape[2] = st.v_scale.shape[2] = sp.seq_kv;
    st.o.shape[2] = sp.seq_q;
    if (sp.seq_q == 0 || sp.seq_kv == 0) continue;
    if (Status s = fn(sp, st, row0); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace detail

Status reference_forward(const AttentionParams& p, const AttentionTensors& t, double* out,
                         double* lse) {
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  AttentionTensors checked;
  if (Status s = detail::check_host_call(p, t, out, "reference_forward", &checked); !s.ok()) return s;
  if (p.block_table) {
    const detail::Unpaged u = detail::unpage(p, checked);
    return reference_forward(u.params, u.tensors, out, lse);
  }
  if (detail::per_sequence_call(p)) {
    // Variable-length: [1, total, H, D] output and [1, H, total] LSE;
    // seqlens_kv: [B, Sq, H, D] and [B, H, Sq].  One sequence at a time.
    const std::int64_t lse_batches = varlen ? 1 : p.batch;
    if (lse) {  // what a sequence without keys keeps: -inf, or its head's sink
      for (std::int64_t bh = 0; bh < lse_batches * p.num_heads; ++bh) {
        for (std::int64_t i = 0; i < p.seq_q; ++i) {
          lse[bh * p.seq_q + i] = p.sinks ? double(p.sinks[bh % p.num_heads]) : -std::numeric_limits<double>::infinity();
        }
      }
    }
    return detail::for_each_sequence(p, checked, [&](const AttentionParams& sp, const AttentionTensors& st, std::int64_t row0) {
      std::vector<double> seq_lse(static_cast<std::size_t>(sp.num_heads * sp.seq_q));
      AttentionTensors sv = st;
      sv.o = make_view(out + row0 * p.num_heads * p.head_dim, st.o.dtype, Layout::kBSH, 1, sp.num_heads, sp.seq_q,
                       sp.head_dim);
      if (Status s = reference_forward(sp, sv, out + row0 * p.num_heads * p.head_dim, seq_lse.data()); !s.ok()) return s;
      if (lse) {  // varlen: head h's row q0 + i of [1, H, total]; seqlens_kv: [b, h, i]
        for (std::int64_t h = 0; h < sp.num_heads; ++h) {
          for (std::int64_t i = 0; i < sp.seq_q; ++i) {
            const std::int64_t at = varlen ? h * p.seq_q + row0 + i : (row0 / p.seq_q * p.num_heads + h) * p.seq_q + i;
            lse[at] = seq_lse[h * sp.seq_q + i];
          }
        }
      }
      return Status::Ok();
    });
  }

  const std::int64_t B = p.batch, H = p.num_heads, Sq = p.seq_q, Skv = p.seq_kv, D = p.head_dim;
  const std::int64_t group = H / p.kv_heads();
  const double scale = p.softmax_scale();
  const int threads = p.threads > 0 ? p.threads : default_thread_count();
  const detail::KeyWindow window = detail::key_window(p);
  const detail::Dropout drop = detail::dropout_of(p);

  detail::ThreadPool::global().parallel_for(B * H, threads, [&](std::int64_t bh, int) {
    const std::int64_t b = bh / H, h = bh % H, hk = h / group;
    const double sink = p.sinks ? double(p.sinks[h]) : -std::numeric_limits<double>::infinity();
    // FP8 inputs and caches: each element times its tensor's (or head's)
    // descale factor; an int8 cache's: times its key's scale.
    auto descale = [](const float* f, std::int64_t count, std::int64_t head) {
      return f ? double(f[count > 1 ? head : 0]) : 1.0;
    };
    const double dq = descale(p.descale_q, p.descale_q_count, h), dk = descale(p.descale_k, p.descale_k_count, hk),
                 dv = descale(p.descale_v, p.descale_v_count, hk);
    std::vector<double> k(Skv * D), v(Skv * D), q(D), s(Skv);
    for (std::int64_t j = 0; j < Skv; ++j) {
      const double ks = t.k_scale.data ? double(static_cast<const float*>(t.k_scale.data)[t.k_scale.offset(b, hk, j, 0)]) : 1.0;
      const double vs = t.v_scale.data ? double(static_cast<const float*>(t.v_scale.data)[t.v_scale.offset(b, hk, j, 0)]) : 1.0;
      for (std::int64_t d = 0; d < D; ++d) {
        k[j * D + d] = detail::load_as_f32(t.k.data, t.k.dtype, t.k.offset(b, hk, j, d)) * dk * ks;
        v[j * D + d] = detail::load_as_f32(t.v.data, t.v.dtype, t.v.offset(b, hk, j, d)) * dv * vs;
      }
    }
    for (std::int64_t i = 0; i < Sq; ++i) {
      for (std::int64_t d = 0; d < D; ++d) {
        q[d] = detail::load_as_f32(t.q.data, t.q.dtype, t.q.offset(b, h, i, d)) * dq;
      }
      double row_max = sink;  // a sink takes part in the maximum and the sum
      for (std::int64_t j = 0; j < Skv; ++j) {
        if (!detail::may_attend(p, window, i, j)) {
          s[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const double dot = detail::dot_f64(q.data(), k.data() + j * D, D);
        s[j] = detail::modified_score(p, dot * scale, h, i, j);
        if (std::isnan(s[j]) || s[j] > row_max) row_max = s[j];  // a NaN score makes the whole row NaN
      }
      double* o = out + ((b * Sq + i) * H + h) * D;
      if (row_max == -std::numeric_limits<double>::infinity()) {  // nothing to attend
        for (std::int64_t d = 0; d < D; ++d) o[d] = 0.0;
        if (lse) lse[(b * H + h) * Sq + i] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double sum = p.sinks ? std::exp(sink - row_max) : 0.0;
      for (std::int64_t j = 0; j < Skv; ++j) {
        s[j] = std::exp(s[j] - row_max);  // exp(-inf) = 0 for masked keys
        sum += s[j];
      }
      for (std::int64_t d = 0; d < D; ++d) o[d] = 0.0;
      for (std::int64_t j = 0; j < Skv; ++j) {
        if (s[j] == 0.0) continue;
        const double w = s[j] / sum * (drop.active ? double(detail::dropout_factor(drop, bh, i, j)) : 1.0);
        for (std::int64_t d = 0; d < D; ++d) o[d] += w * v[j * D + d];
      }
      if (lse) lse[(b * H + h) * Sq + i] = row_max + std::log(sum);
    }
  });
  return Status::Ok();
}

}  // namespace fa

namespace fa {

Status same_dtype_attention(const AttentionParams& p, const AttentionTensors& t, DType compute, bool subtract_max,
                            double* out) {
  if (is_fp8(t.q.dtype) || is_fp8(compute) || t.k.dtype != t.q.dtype) {
    return Status::Unsupported("same_dtype_attention: no FP8 or int8 arithmetic (FP8 inputs and quantized K/V caches "
                               "are products of scaled values, checked against reference_forward)");
  }
  AttentionTensors checked;
  if (Status s = detail::check_host_call(p, t, out, "same_dtype_attention", &checked); !s.ok()) return s;
  if (p.block_table) {
    const detail::Unpaged u = detail::unpage(p, checked);
    return same_dtype_attention(u.params, u.tensors, compute, subtract_max, out);
  }
  if (detail::per_sequence_call(p)) {
    return detail::for_each_sequence(p, checked, [&](const AttentionParams& sp, const AttentionTensors& st, std::int64_t row0) {
      return same_dtype_attention(sp, st, compute, subtract_max, out + row0 * p.num_heads * p.head_dim);
    });
  }
  const std::int64_t B = p.batch, H = p.num_heads, Sq = p.seq_q, Skv = p.seq_kv, D = p.head_dim;
  const std::int64_t group = H / p.kv_heads();
  // Round an fp32 value to the compute dtype and back.
  auto r = [compute](float x) {
    switch (compute) {
      case DType::kF16: return detail::f16_to_f32(detail::f32_to_f16(x));
      case DType::kBF16: return detail::bf16_to_f32(detail::f32_to_bf16(x));
      default: return x;  // fp32 (FP8 was refused above)
    }
  };
  const float scale = r(p.softmax_scale());
  const int threads = p.threads > 0 ? p.threads : default_thread_count();
  const detail::KeyWindow window = detail::key_window(p);
  const detail::Dropout drop = detail::dropout_of(p);
  detail::ThreadPool::global().parallel_for(B * H, threads, [&](std::int64_t bh, int) {
    const std::int64_t b = bh / H, h = bh % H, hk = h / group;
    const float sink = p.sinks ? r(p.sinks[h]) : -std::numeric_limits<float>::infinity();
    // Each operand rounded to the dtype once (V transposed, so a dim's sum
    // over keys reads it in order); the sums below run in the same order.
    std::vector<float> s(Skv), w(Skv), q(D), k(Skv * D), vt(D * Skv);
    for (std::int64_t j = 0; j < Skv; ++j) {
      for (std::int64_t d = 0; d < D; ++d) {
        k[j * D + d] = r(detail::load_as_f32(t.k.data, t.k.dtype, t.k.offset(b, hk, j, d)));
        vt[d * Skv + j] = r(detail::load_as_f32(t.v.data, t.v.dtype, t.v.offset(b, hk, j, d)));
      }
    }
    for (std::int64_t i = 0; i < Sq; ++i) {
      for (std::int64_t d = 0; d < D; ++d) q[d] = r(detail::load_as_f32(t.q.data, t.q.dtype, t.q.offset(b, h, i, d)));
      float row_max = sink;
      for (std::int64_t j = 0; j < Skv; ++j) {
        if (!detail::may_attend(p, window, i, j)) {
          s[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        float dot = 0.0f;  // fp32 accumulation of products of dtype values
        for (std::int64_t d = 0; d < D; ++d) dot += q[d] * k[j * D + d];
        s[j] = r(static_cast<float>(detail::modified_score(p, r(r(dot) * scale), h, i, j)));
        row_max = std::max(row_max, s[j]);
      }
      const float shift = subtract_max && row_max != -std::numeric_limits<float>::infinity() ? row_max : 0.0f;
      float sum = p.sinks ? r(std::exp(r(sink - shift))) : 0.0f;
      for (std::int64_t j = 0; j < Skv; ++j) {
        s[j] = r(std::exp(r(s[j] - shift)));
        sum = r(sum + s[j]);
      }
      // Each key's weight once, rounded as the sums below use it.
      for (std::int64_t j = 0; j < Skv; ++j) {
        const float keep = drop.active && s[j] != 0.0f ? detail::dropout_factor(drop, bh, i, j) : 1.0f;
        w[j] = r(r(s[j] / sum) * keep);
      }
      double* o = out + ((b * Sq + i) * H + h) * D;
      for (std::int64_t d = 0; d < D; ++d) {
        float acc = 0.0f;
        const float* v_d = vt.data() + d * Skv;
        for (std::int64_t j = 0; j < Skv; ++j) {
          if (s[j] == 0.0f) continue;
          acc += w[j] * v_d[j];
        }
        // A row with nothing to attend: 0/0 in the naive form; 0 by definition otherwise.
        o[d] = sum == 0.0f && subtract_max ? 0.0 : static_cast<double>(r(acc));  // (a sink keeps sum > 0)
      }
    }
  });
  return Status::Ok();
}

}  // namespace fa
