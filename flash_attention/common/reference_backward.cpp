// Float64 reference of the backward pass, written from the formulas with a
// full score row in memory, one (batch, K/V head) at a time:
//   P = softmax(S) (with the sink in the denominator), O = (P ∘ Z) V,
//   D_i = dO_i · O_i, dP = dO Vᵀ, dS = P ∘ (Z ∘ dP − D),
//   dV = (P ∘ Z)ᵀ dO, dQ = scale · dS' K, dK = scale · dS'ᵀ Q,
// where Z is the dropout factor, dS' is dS through softcap's tanh
// (dS · (1 − tanh²)), dbias = dS and dsink_h = −Σ_i P_sink,i D_i.  Slow and
// simple on purpose; tests check it against finite differences of
// reference_forward.
#include <cmath>
#include <string>
#include <limits>
#include <vector>

#include "backward_checks.h"
#include "dropout.h"
#include "dtype_convert.h"
#include "flash_attention/flash_attention.h"
#include "mask.h"
#include "thread_pool.h"

namespace fa {
namespace {

// Where rows lie: a fixed-length call (q0 = k0 = 0, batch entries b), or one
// variable-length sequence as a call of batch 1 whose rows start at query
// token q0 and key token k0 of the packed tensors.
struct SequenceRows {
  AttentionParams p;
  std::int64_t q0 = 0, k0 = 0;
};

// The gradients of one sequence (or of a whole fixed-length call), added
// into the BSH-ordered outputs of the call (`H`, `Hkv`: its heads);
// dbias / dsinks partials per (batch, head) into `bias_parts` /
// `sink_parts` (summed in a fixed order by the caller).  `rd` rounds each
// stage's result: the identity for the float64 reference, or to a dtype
// for the same-dtype yardstick (scores, P, O, D, dP, dS each rounded; the
// gradients' sums are rounded once, by the caller).
template <class Round>
void backward_rows(const SequenceRows& r, const AttentionTensors& t, const TensorView& dout, double* dq, double* dk,
                   double* dv, std::vector<double>* bias_parts, std::vector<double>* sink_parts, Round rd) {
  const AttentionParams& p = r.p;
  const std::int64_t B = p.batch, H = p.num_heads, Hkv = p.kv_heads(), Sq = p.seq_q, Skv = p.seq_kv, D = p.head_dim;
  const std::int64_t group = H / Hkv;
  const double scale = p.softmax_scale();
  const int threads = p.threads > 0 ? p.threads : default_thread_count();
  const detail::KeyWindow window = detail::key_window(p);
  const detail::Dropout drop = detail::dropout_of(p);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  // One item per (batch, K/V head): it owns that head's dK and dV rows, and
  // each query head of its group's dQ rows.
  detail::ThreadPool::global().parallel_for(B * Hkv, threads, [&](std::int64_t item, int) {
    const std::int64_t b = item / Hkv, hk = item % Hkv;
    auto at = [&](const TensorView& v, std::int64_t h, std::int64_t s, std::int64_t d, std::int64_t s0) {
      return double(detail::load_as_f32(v.data, v.dtype, v.offset(b, h, s0 + s, d)));
    };
    std::vector<double> k(Skv * D), v(Skv * D), q(D), g(D), s(Skv), tanh_s(Skv), prob(Skv), zf(Skv), dk_acc(Skv * D, 0.0),
        dv_acc(Skv * D, 0.0);
    for (std::int64_t j = 0; j < Skv; ++j) {
      for (std::int64_t d = 0; d < D; ++d) {
        k[j * D + d] = at(t.k, hk, j, d, r.k0);
        v[j * D + d] = at(t.v, hk, j, d, r.k0);
      }
    }
    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const std::int64_t bh = b * H + h;
      const double sink = p.sinks ? double(p.sinks[h]) : kNegInf;
      for (std::int64_t i = 0; i < Sq; ++i) {
        for (std::int64_t d = 0; d < D; ++d) {
          q[d] = at(t.q, h, i, d, r.q0);
          g[d] = at(dout, h, i, d, r.q0);
        }
        // The row's scores with their modifiers, softcap's tanh kept.
        double row_max = sink;
        for (std::int64_t j = 0; j < Skv; ++j) {
          tanh_s[j] = 0.0;
          if (!detail::may_attend(p, window, i, j)) {
            s[j] = kNegInf;
            continue;
          }
          double dot = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dot += q[d] * k[j * D + d];
          double x = rd(rd(dot) * scale);
          if (p.softcap > 0.0f) {
            tanh_s[j] = rd(std::tanh(x / double(p.softcap)));
            x = rd(double(p.softcap) * tanh_s[j]);
          }
          if (p.alibi_slopes) x = rd(x - double(p.alibi_slopes[h]) * double(std::llabs(i + Skv - Sq - j)));
          if (p.bias) x = rd(x + double(p.bias[((p.bias_heads > 1 ? h : 0) * Sq + i) * Skv + j]));
          s[j] = x;
          if (std::isnan(x) || x > row_max) row_max = x;
        }
        if (row_max == kNegInf) continue;  // nothing attended: no gradient flows through this row
        double sum = p.sinks ? std::exp(sink - row_max) : 0.0;
        for (std::int64_t j = 0; j < Skv; ++j) sum += std::exp(s[j] - row_max);
        const double lse = row_max + std::log(sum);
        // O_i (with the dropout factors), then D_i = dO_i · O_i.
        std::vector<double> o(D, 0.0);
        for (std::int64_t j = 0; j < Skv; ++j) {
          prob[j] = rd(std::exp(s[j] - lse));
          zf[j] = drop.active ? double(detail::dropout_factor(drop, bh, i, j)) : 1.0;
          if (prob[j] == 0.0) continue;
          for (std::int64_t d = 0; d < D; ++d) o[d] += prob[j] * zf[j] * v[j * D + d];
        }
        double di = 0.0;
        for (std::int64_t d = 0; d < D; ++d) di += g[d] * rd(o[d]);
        di = rd(di);
        if (p.sinks) (*sink_parts)[bh] -= rd(std::exp(sink - lse)) * di;
        double* dq_row = dq + ((r.q0 + b * Sq + i) * H + h) * D;
        for (std::int64_t j = 0; j < Skv; ++j) {
          if (prob[j] == 0.0) continue;
          double dp = 0.0;
          for (std::int64_t d = 0; d < D; ++d) dp += g[d] * v[j * D + d];
          const double ds = rd(prob[j] * (zf[j] * rd(dp) - di));
          if (bias_parts && !bias_parts->empty()) (*bias_parts)[(bh * Sq + i) * Skv + j] = ds;
          const double dsr = rd(rd(p.softcap > 0.0f ? ds * (1.0 - tanh_s[j] * tanh_s[j]) : ds) * scale);
          for (std::int64_t d = 0; d < D; ++d) {
            dq_row[d] += dsr * k[j * D + d];
            dk_acc[j * D + d] += dsr * q[d];
            dv_acc[j * D + d] += rd(prob[j] * zf[j]) * g[d];
          }
        }
      }
    }
    for (std::int64_t j = 0; j < Skv; ++j) {
      const std::int64_t row = (r.k0 + b * Skv + j) * Hkv + hk;
      for (std::int64_t d = 0; d < D; ++d) {
        dk[row * D + d] += dk_acc[j * D + d];
        dv[row * D + d] += dv_acc[j * D + d];
      }
    }
  });
}

// reference_backward and same_dtype_backward: the checks, the sequences,
// and the fixed-order sums of dbias and dsinks.
template <class Round>
Status host_backward(const AttentionParams& p, const AttentionTensors& t, const TensorView& dout, double* dq, double* dk,
                     double* dv, double* dbias, double* dsinks, const char* who, Round rd) {
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  if (!dq || !dk || !dv) return Status::Invalid(std::string(who) + ": output pointer is null");
  // O is not read: a stand-in view of dQ's doubles lets validate() pass it.
  AttentionTensors checked = t;
  checked.o = make_view(dq, t.q.dtype, Layout::kBSH, varlen ? 1 : p.batch, p.num_heads, p.seq_q, p.head_dim);
  if (Status s = detail::check_backward_inputs(p, checked, dout, who); !s.ok()) return s;
  if (dbias && !p.bias) return Status::Invalid(std::string(who) + ": dbias given but the call has no bias tensor");
  if (dsinks && !p.sinks) return Status::Invalid(std::string(who) + ": dsinks given but the call has no sinks");

  const std::int64_t batches = varlen ? 1 : p.batch, H = p.num_heads, Hkv = p.kv_heads(), D = p.head_dim;
  for (std::int64_t n = 0; n < batches * p.seq_q * H * D; ++n) dq[n] = 0.0;
  for (std::int64_t n = 0; n < batches * p.seq_kv * Hkv * D; ++n) dk[n] = dv[n] = 0.0;
  // Per-(batch, head) partials of dbias and dsinks, summed below in order.
  std::vector<double> bias_parts(dbias ? std::size_t(p.batch * H * p.seq_q * p.seq_kv) : 0, 0.0);
  std::vector<double> sink_parts(std::size_t(p.batch * H), 0.0);
  if (!varlen) {
    backward_rows({p, 0, 0}, t, dout, dq, dk, dv, &bias_parts, &sink_parts, rd);
  } else {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      SequenceRows r{detail::sequence_params(p, b), p.cu_seqlens_q[b], p.cu_seqlens_kv[b]};
      if (r.p.seq_q == 0 || r.p.seq_kv == 0) continue;
      std::vector<double> sinks_b(std::size_t(H), 0.0);
      backward_rows(r, t, dout, dq, dk, dv, nullptr, &sinks_b, rd);
      for (std::int64_t h = 0; h < H; ++h) sink_parts[b * H + h] = sinks_b[h];
    }
  }
  if (dbias) {
    const std::int64_t n = p.seq_q * p.seq_kv;
    for (std::int64_t x = 0; x < p.bias_heads * n; ++x) dbias[x] = 0.0;
    for (std::int64_t bh = 0; bh < p.batch * H; ++bh) {
      double* to = dbias + (p.bias_heads > 1 ? bh % H : 0) * n;
      for (std::int64_t x = 0; x < n; ++x) to[x] += bias_parts[bh * n + x];
    }
  }
  if (dsinks) {
    for (std::int64_t h = 0; h < H; ++h) dsinks[h] = 0.0;
    for (std::int64_t bh = 0; bh < p.batch * H; ++bh) dsinks[bh % H] += sink_parts[bh];
  }
  // The sums rounded once (the identity for the reference).
  for (std::int64_t n = 0; n < batches * p.seq_q * H * D; ++n) dq[n] = rd(dq[n]);
  for (std::int64_t n = 0; n < batches * p.seq_kv * Hkv * D; ++n) dk[n] = rd(dk[n]), dv[n] = rd(dv[n]);
  return Status::Ok();
}

}  // namespace

Status reference_backward(const AttentionParams& p, const AttentionTensors& t, const TensorView& dout, double* dq,
                          double* dk, double* dv, double* dbias, double* dsinks) {
  return host_backward(p, t, dout, dq, dk, dv, dbias, dsinks, "reference_backward", [](double x) { return x; });
}

Status same_dtype_backward(const AttentionParams& p, const AttentionTensors& t, const TensorView& dout, DType compute,
                           double* dq, double* dk, double* dv, double* dbias, double* dsinks) {
  if (compute != DType::kF32 && compute != DType::kF16 && compute != DType::kBF16) {
    return Status::Unsupported("same_dtype_backward: compute dtype " + std::string(dtype_name(compute)) +
                               " (expected fp32, fp16 or bf16)");
  }
  return host_backward(p, t, dout, dq, dk, dv, dbias, dsinks, "same_dtype_backward", [compute](double x) {
    const float f = static_cast<float>(x);
    switch (compute) {
      case DType::kF16: return double(detail::f16_to_f32(detail::f32_to_f16(f)));
      case DType::kBF16: return double(detail::bf16_to_f32(detail::f32_to_bf16(f)));
      default: return double(f);
    }
  });
}

}  // namespace fa
