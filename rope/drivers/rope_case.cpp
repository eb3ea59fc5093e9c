#include "rope_case.h"

#include <algorithm>
#include <cmath>

#include "common/dtype_convert.h"
#include "driver/cli_args.h"

namespace fa::cli {

RopeParams rope_params(const RopeCase& c) {
  RopeParams p = c.params;
  p.threads = c.threads;
  p.isa = c.isa;
  if (c.layout == Layout::kTND) {
    p.cu_seqlens = c.cu_seqlens.data();
    p.num_sequences = static_cast<std::int64_t>(c.cu_seqlens.size()) - 1;
  }
  return p;
}

namespace {

// The views of a [batch, heads, seq, head_dim] tensor in the case's layout
// (TND: batch 1 over the total tokens).
TensorView view_of(const RopeCase& c, void* data, DType dtype, std::int64_t heads) {
  const bool packed = c.layout == Layout::kTND;
  return make_view(data, dtype, packed ? Layout::kBSND : c.layout, packed ? 1 : c.batch, heads, c.seq, c.head_dim);
}

const char* mode_name(RopeMode m) { return m == RopeMode::kRotateHalf ? "rotate-half" : "interleaved"; }

const char* scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kNtk: return "ntk";
    case RopeScaling::kLlama3: return "llama3";
    default: return "none";
  }
}

}  // namespace

double rope_bytes_moved(const RopeCase& c) {
  const double tokens = static_cast<double>(c.batch) * static_cast<double>(c.seq);
  const double vectors = tokens * static_cast<double>(c.heads + c.kv_heads);
  const double in = static_cast<double>(dtype_size(c.dtype));
  if (!c.out_dtype) {
    const std::int64_t rd = c.params.rotary_dim > 0 ? c.params.rotary_dim : c.head_dim;
    return vectors * static_cast<double>(rd) * 2.0 * in;
  }
  return vectors * static_cast<double>(c.head_dim) * (in + static_cast<double>(dtype_size(*c.out_dtype)));
}

RopeBuffers make_rope_buffers(const RopeCase& c) {
  RopeBuffers b;
  const std::int64_t tokens = c.batch * c.seq;
  const std::size_t es = dtype_size(c.dtype);
  b.q = HostBuffer(static_cast<std::size_t>(tokens * c.heads * c.head_dim) * es);
  b.k = HostBuffer(static_cast<std::size_t>(tokens * c.kv_heads * c.head_dim) * es);
  fill_normal(b.q.data(), c.dtype, tokens * c.heads * c.head_dim, c.seed, 1.0);
  fill_normal(b.k.data(), c.dtype, tokens * c.kv_heads * c.head_dim, c.seed + 1, 1.0);
  b.tensors.q = view_of(c, b.q.data(), c.dtype, c.heads);
  b.tensors.k = view_of(c, b.k.data(), c.dtype, c.kv_heads);
  if (c.out_dtype) {
    const std::size_t os = dtype_size(*c.out_dtype);
    b.q_out = HostBuffer(static_cast<std::size_t>(tokens * c.heads * c.head_dim) * os);
    b.k_out = HostBuffer(static_cast<std::size_t>(tokens * c.kv_heads * c.head_dim) * os);
    b.tensors.q_out = view_of(c, b.q_out.data(), *c.out_dtype, c.heads);
    b.tensors.k_out = view_of(c, b.k_out.data(), *c.out_dtype, c.kv_heads);
  }
  const RopeParams p = rope_params(c);
  // Each token's index in its sequence, then the positions asked for.
  std::vector<std::int64_t> index(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) index[static_cast<std::size_t>(t)] = t % c.seq;
  if (c.layout == Layout::kTND) {
    for (std::size_t s = 0; s + 1 < c.cu_seqlens.size(); ++s) {
      for (std::int32_t t = c.cu_seqlens[s]; t < c.cu_seqlens[s + 1]; ++t) index[static_cast<std::size_t>(t)] = t - c.cu_seqlens[s];
    }
  }
  std::int64_t max_position = 0;
  if (c.random_positions || c.position_offset >= 0) {
    NormalRng rng(c.seed + 7);
    b.positions.resize(index.size());
    for (std::size_t t = 0; t < index.size(); ++t) {
      b.positions[t] = c.random_positions ? static_cast<std::int64_t>(rng.next_uniform() * (1 << 20)) : c.position_offset + index[t];
    }
    b.tensors.positions = b.positions.data();
  }
  for (std::size_t t = 0; t < index.size(); ++t) max_position = std::max(max_position, b.positions.empty() ? index[t] : b.positions[t]);
  if (c.tables) {
    // The tables a caller would precompute: cos and sin of the same angles
    // in double, rounded to fp32.
    const std::int64_t rd = p.rotary_dim > 0 ? p.rotary_dim : c.head_dim, half = rd / 2;
    std::vector<double> inv_freq(static_cast<std::size_t>(half));
    if (!rope_inv_frequencies(p, rd, inv_freq.data()).ok()) throw UsageError("the RoPE parameters are not valid");
    b.cos.resize(static_cast<std::size_t>((max_position + 1) * half));
    b.sin.resize(b.cos.size());
    for (std::int64_t pos = 0; pos <= max_position; ++pos) {
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos) * inv_freq[static_cast<std::size_t>(i)];
        b.cos[static_cast<std::size_t>(pos * half + i)] = static_cast<float>(std::cos(angle));
        b.sin[static_cast<std::size_t>(pos * half + i)] = static_cast<float>(std::sin(angle));
      }
    }
    b.tensors.cos = b.cos.data();
    b.tensors.sin = b.sin.data();
    b.tensors.table_positions = max_position + 1;
  }
  if (c.with_reference) {
    b.q_ref.resize(static_cast<std::size_t>(tokens * c.heads * c.head_dim));
    b.k_ref.resize(static_cast<std::size_t>(tokens * c.kv_heads * c.head_dim));
    if (Status s = rope_reference(p, b.tensors, b.q_ref.data(), b.k_ref.data()); !s.ok()) throw UsageError(s.message());
  }
  return b;
}

RopeCheck check_rope(const RopeCase& c, const RopeBuffers& b) {
  RopeCheck r;
  const DType out = c.out_dtype ? *c.out_dtype : c.dtype;
  const TensorView& batch_view = b.tensors.q;
  double err2 = 0, ref2 = 0, worst = 0;
  for (const auto& [view, ref] : {std::pair{c.out_dtype ? b.tensors.q_out : b.tensors.q, &b.q_ref},
                                  std::pair{c.out_dtype ? b.tensors.k_out : b.tensors.k, &b.k_ref}}) {
    const std::int64_t heads = view.shape[1], seq = view.shape[2], d = view.shape[3];
    for (std::int64_t bb = 0; bb < batch_view.shape[0]; ++bb) {
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t s = 0; s < seq; ++s) {
          const double* y = ref->data() + ((bb * heads + h) * seq + s) * d;
          // The pair's magnitude bounds fp32's error in the rotation.
          double pair_mag = 0;
          for (std::int64_t j = 0; j < d; ++j) pair_mag = std::max(pair_mag, std::fabs(y[j]));
          for (std::int64_t j = 0; j < d; ++j) {
            const double o = detail::load_as_f32(view.data, out, view.offset(bb, h, s, j));
            if (!std::isfinite(o)) {
              ++r.nonfinite;
              continue;
            }
            const double e = std::fabs(o - y[j]);
            const double compute = 0x1p-21 * pair_mag;
            const double allowed = half_ulp(out, std::fabs(y[j]) + compute) + compute;
            if (e > allowed) ++r.mismatches;
            worst = std::max(worst, e / allowed);
            r.max_abs_error = std::max(r.max_abs_error, e);
            err2 += e * e;
            ref2 += y[j] * y[j];
          }
        }
      }
    }
  }
  r.rel_l2_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  r.worst_share = worst;
  r.pass = r.nonfinite == 0 && r.mismatches == 0;
  return r;
}

std::string describe(const RopeCase& c) {
  std::string s = std::string(mode_name(c.params.mode)) + " " + std::string(dtype_name(c.dtype));
  if (c.out_dtype) s += "->" + std::string(dtype_name(*c.out_dtype));
  else s += " in-place";
  s += " " + std::string(layout_name(c.layout)) + " B=" + std::to_string(c.batch) + " S=" + std::to_string(c.seq) +
       " H=" + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " D=" + std::to_string(c.head_dim);
  if (c.params.rotary_dim > 0 && c.params.rotary_dim != c.head_dim) s += " rotary=" + std::to_string(c.params.rotary_dim);
  if (c.params.scaling != RopeScaling::kNone) s += " scaling=" + std::string(scaling_name(c.params.scaling)) + "x" + std::to_string(c.params.factor);
  if (c.position_offset >= 0) s += " offset=" + std::to_string(c.position_offset);
  if (c.random_positions) s += " random-positions";
  if (c.tables) s += " tables";
  if (c.threads) s += " threads=" + std::to_string(c.threads);
  if (c.isa) s += " isa=" + std::string(isa_name(*c.isa));
  return s;
}

}  // namespace fa::cli
