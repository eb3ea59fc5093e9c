#include "attention_case.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "../../flash_attention/common/dtype_convert.h"
#include "host_tensor.h"
#include "paged_cache.h"
#include "quantized_cache.h"

namespace fa::cli {

std::string mask_mode_name(MaskMode mode) {
  switch (mode) {
    case MaskMode::kNone: return "none";
    case MaskMode::kCausal: return "causal";
    case MaskMode::kExplicit: return "mask";
    case MaskMode::kCausalAndExplicit: return "causal+mask";
  }
  return "?";
}

double lse_bound(DType dtype) {
  return dtype == DType::kF16 && !mixed_precision_softmax() ? 1e-3 : kLseBound;
}

double rel_l2_bound(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1e-2;
    // FP8 (FA3), against the reference on the decoded values: the products
    // and softmax are fp32, so the output's rounding to its dtype remains.
    case DType::kFP8E4M3:
    case DType::kFP8E5M2: return 1e-2;
    case DType::kI8: break;  // a K/V cache dtype only: the bound is Q's
  }
  return 0.0;
}

namespace {
std::string tile_text(int tile, int build_default) {
  const int t = tile != 0 ? tile : build_default;
  return t == kTileAuto ? std::string("auto") : std::to_string(t);
}
}  // namespace

std::string describe(const CaseSpec& s) {
  const AttentionParams& p = s.params;
  std::ostringstream out;
  out << dtype_name(s.dtype) << " " << (s.seq_lens_q.empty() ? layout_name(s.layout) : "TND") << " "
      << mask_mode_name(s.mask)
      << " B=" << (s.cache_seqlens_kv.empty() ? p.batch : static_cast<std::int64_t>(s.cache_seqlens_kv.size())) << " Sq=" << p.seq_q << " Skv=" << p.seq_kv << " H=" << p.num_heads
      << " Hkv=" << p.kv_heads() << " D=" << p.head_dim << " tile=" << tile_text(p.tile_q, default_tile_q()) << "x"
      << tile_text(p.tile_kv, default_tile_kv()) << " threads=" << p.threads;
  if (s.input_scale != 1.0) out << " input_scale=" << s.input_scale;
  if (!s.cache_seqlens_kv.empty()) {
    out << " seqlens_kv=";
    for (std::size_t i = 0; i < s.cache_seqlens_kv.size(); ++i) out << (i ? "," : "") << s.cache_seqlens_kv[i];
  }
  if (s.paged_block_size > 0) out << " paged(block=" << s.paged_block_size << ")";
  if (!s.seq_lens_q.empty()) {
    out << " varlen q=";
    for (std::size_t i = 0; i < s.seq_lens_q.size(); ++i) out << (i ? "," : "") << s.seq_lens_q[i];
    out << " kv=";
    for (std::size_t i = 0; i < s.seq_lens_kv.size(); ++i) out << (i ? "," : "") << s.seq_lens_kv[i];
  }
  if (p.isa) out << " isa=" << isa_name(*p.isa);
  if (p.sparse_mode) {
    out << " sparse_mode=" << static_cast<int>(*p.sparse_mode);
    if (p.pre_tokens < kUnboundedTokens) out << " pre=" << p.pre_tokens;
    if (p.next_tokens < kUnboundedTokens) out << " next=" << p.next_tokens;
  }
  if (s.with_sinks) out << " sinks";
  if (s.with_alibi) out << " alibi";
  if (s.bias_heads) out << " bias_heads=" << s.bias_heads;
  if (p.softcap > 0) out << " softcap=" << p.softcap;
  if (p.keep_prob < 1.0f) out << " keep_prob=" << p.keep_prob;
  if (is_fp8(s.dtype)) {
    out << " out=" << dtype_name(s.out_dtype);
    if (s.descale) out << (s.descale == 1 ? " descale=tensor" : " descale=head");
  }
  if (s.kv_dtype) out << " kv_cache=" << dtype_name(*s.kv_dtype);
  if (s.accuracy_rule) out << " accuracy-rule";
  if (p.num_splits != 0 && p.num_splits != 1) {
    out << " splits=" << (p.num_splits == kSplitsAuto ? std::string("auto") : std::to_string(p.num_splits));
  }
  return out.str();
}

Status case_supported(Version version, const CaseSpec& spec) {
  AttentionParams p = spec.params;
  static const std::int32_t stand_in[1] = {0};  // only tested for presence
  static const float sink_stand_in[1] = {0.0f};
  if (!spec.seq_lens_q.empty()) p.cu_seqlens_q = p.cu_seqlens_kv = stand_in;
  if (!spec.cache_seqlens_kv.empty()) p.seqlens_kv = stand_in;
  if (spec.paged_block_size > 0) p.block_table = stand_in;
  if (spec.with_sinks) p.sinks = sink_stand_in;
  return version_supports(version, p, spec.dtype, spec.kv_dtype);
}

double grad_rel_l2_bound(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1e-4;
    case DType::kF16: return 5e-3;
    default: return 3e-2;
  }
}

namespace {

// Relative L2 error of `n` values against the reference (absolute where the
// reference is all zeros); a non-finite value counts in `nonfinite`.
double rel_l2(const std::vector<double>& got, const std::vector<double>& want, std::int64_t* nonfinite) {
  double err2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++*nonfinite;
      continue;
    }
    err2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
  }
  return ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
}

// The backward half of a case: a random dO, the gradients (NaN first, so
// an element the kernel forgets shows), and their errors into `r`.
void check_gradients(const CaseSpec& spec, const AttentionParams& p, const AttentionTensors& t, Layout layout,
                     BackwardFn backward, CaseResult* r) {
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  const std::int64_t B = varlen ? 1 : p.batch, H = p.num_heads, Hkv = p.kv_heads(), Sq = p.seq_q, Skv = p.seq_kv,
                     D = p.head_dim;
  const DType gd = spec.fp32_grads ? DType::kF32 : spec.dtype;
  HostBuffer dout(B * H * Sq * D * dtype_size(spec.dtype));
  fill_normal(dout.data(), spec.dtype, B * H * Sq * D, spec.seed * 4 + 9, 1.0);
  HostBuffer grads[3] = {HostBuffer(B * H * Sq * D * dtype_size(gd)), HostBuffer(B * Hkv * Skv * D * dtype_size(gd)),
                         HostBuffer(B * Hkv * Skv * D * dtype_size(gd))};
  const std::int64_t counts[3] = {B * H * Sq * D, B * Hkv * Skv * D, B * Hkv * Skv * D};
  for (int i = 0; i < 3; ++i) {
    for (std::int64_t n = 0; n < counts[i]; ++n) {
      detail::store_from_f32(grads[i].data(), gd, n, std::numeric_limits<float>::quiet_NaN());
    }
  }
  AttentionGrads g;
  g.dout = make_view(dout.data(), spec.dtype, layout, B, H, Sq, D);
  g.dq = make_view(grads[0].data(), gd, layout, B, H, Sq, D);
  g.dk = make_view(grads[1].data(), gd, layout, B, Hkv, Skv, D);
  g.dv = make_view(grads[2].data(), gd, layout, B, Hkv, Skv, D);
  std::vector<float> dbias(p.bias ? static_cast<std::size_t>(p.bias_heads * Sq * Skv) : 0, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> dsinks(p.sinks ? static_cast<std::size_t>(H) : 0, std::numeric_limits<float>::quiet_NaN());
  g.dbias = p.bias ? dbias.data() : nullptr;
  g.dsinks = p.sinks ? dsinks.data() : nullptr;
  r->status = backward(p, t, g);
  if (!r->status.ok()) return;
  const GradientCheck c = compare_gradients(p, t, g, spec.dtype);
  r->status = c.status;
  r->grad_rel_l2_error = c.worst_rel_l2;
  r->worst_grad = c.worst;
  r->grads_passed = c.passed;
  r->nonfinite += c.nonfinite;
}

}  // namespace

GradientCheck compare_gradients(const AttentionParams& p, const AttentionTensors& t, const AttentionGrads& g, DType dtype) {
  GradientCheck c;
  const bool varlen = p.cu_seqlens_q && p.cu_seqlens_kv;
  const std::int64_t B = varlen ? 1 : p.batch, H = p.num_heads, Hkv = p.kv_heads(), Sq = p.seq_q, Skv = p.seq_kv,
                     D = p.head_dim;
  const std::int64_t counts[3] = {B * H * Sq * D, B * Hkv * Skv * D, B * Hkv * Skv * D};
  const DType gds[3] = {g.dq.dtype, g.dk.dtype, g.dv.dtype};
  std::vector<float> none;
  const std::vector<float> dbias(g.dbias ? g.dbias : none.data(), g.dbias ? g.dbias + p.bias_heads * Sq * Skv : none.data());
  const std::vector<float> dsinks(g.dsinks ? g.dsinks : none.data(), g.dsinks ? g.dsinks + H : none.data());
  std::vector<double> ref[3] = {std::vector<double>(counts[0]), std::vector<double>(counts[1]), std::vector<double>(counts[2])};
  std::vector<double> ref_dbias(dbias.size()), ref_dsinks(dsinks.size());
  if (Status s = reference_backward(p, t, g.dout, ref[0].data(), ref[1].data(), ref[2].data(),
                                    g.dbias ? ref_dbias.data() : nullptr, g.dsinks ? ref_dsinks.data() : nullptr);
      !s.ok()) {
    c.status = s;
    return c;
  }
  // The yardstick of the accuracy rule, for the 16-bit dtypes.
  std::vector<double> same[3], same_dbias(ref_dbias.size()), same_dsinks(ref_dsinks.size());
  const bool rule = dtype != DType::kF32;
  if (rule) {
    for (int i = 0; i < 3; ++i) same[i].resize(ref[i].size());
    if (Status s = same_dtype_backward(p, t, g.dout, dtype, same[0].data(), same[1].data(), same[2].data(),
                                       g.dbias ? same_dbias.data() : nullptr, g.dsinks ? same_dsinks.data() : nullptr);
        !s.ok()) {
      c.status = s;
      return c;
    }
  }
  const char* names[3] = {"dQ", "dK", "dV"};
  const std::int64_t heads[3] = {H, Hkv, Hkv}, seqs[3] = {Sq, Skv, Skv};
  const double bound = grad_rel_l2_bound(dtype);
  c.passed = true;
  // The accuracy rule: our max error at most twice the yardstick's, plus
  // a floor of fp32 rounding (1e-5 of the largest reference value) for the
  // degenerate gradients both get almost exactly right (one key a row: dS
  // = P (dP - D) is 0, and the yardstick may land on it exactly).
  auto within_rule = [rule](const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& same) {
    if (!rule) return false;
    double ours = 0.0, yardstick = 0.0, largest = 0.0;
    for (std::size_t n = 0; n < got.size(); ++n) {
      ours = std::max(ours, std::abs(got[n] - want[n]));
      yardstick = std::max(yardstick, std::abs(same[n] - want[n]));
      largest = std::max(largest, std::abs(want[n]));
    }
    return ours <= 2.0 * yardstick + 1e-5 * largest;
  };
  auto note = [&](const char* name, double e, bool within) {
    if (e > c.worst_rel_l2 || c.worst.empty()) {
      c.worst_rel_l2 = std::max(c.worst_rel_l2, e);
      c.worst = name;
    }
    c.passed = c.passed && within;
  };
  for (int i = 0; i < 3; ++i) {  // the reference's order is BSH
    const TensorView& view = i == 0 ? g.dq : i == 1 ? g.dk : g.dv;
    std::vector<double> got(ref[i].size());
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < heads[i]; ++h) {
        for (std::int64_t s = 0; s < seqs[i]; ++s) {
          for (std::int64_t d = 0; d < D; ++d) {
            got[((b * seqs[i] + s) * heads[i] + h) * D + d] = detail::load_as_f32(view.data, gds[i], view.offset(b, h, s, d));
          }
        }
      }
    }
    const double e = rel_l2(got, ref[i], &c.nonfinite);
    c.rel_l2[i] = e;
    note(names[i], e, e <= bound || within_rule(got, ref[i], same[i]));
  }
  for (auto [name, values, want, yard] : {std::tuple{"dbias", &dbias, &ref_dbias, &same_dbias},
                                          std::tuple{"dsinks", &dsinks, &ref_dsinks, &same_dsinks}}) {
    if (values->empty()) continue;
    const std::vector<double> got(values->begin(), values->end());
    const double e = rel_l2(got, *want, &c.nonfinite);
    note(name, e, e <= bound || within_rule(got, *want, *yard));
  }
  return c;
}

CaseResult run_case(const CaseSpec& spec, ForwardFn forward, BackwardFn backward) {
  AttentionParams p = spec.params;
  const bool varlen = !spec.seq_lens_q.empty();
  std::vector<std::int32_t> cu_q{0}, cu_kv{0};
  Layout layout = spec.layout;
  if (varlen) {  // packed: batch = sequences, seq = total tokens, views of batch 1
    for (int n : spec.seq_lens_q) cu_q.push_back(cu_q.back() + n);
    for (int n : spec.seq_lens_kv) cu_kv.push_back(cu_kv.back() + n);
    p.batch = static_cast<std::int64_t>(spec.seq_lens_q.size());
    p.seq_q = cu_q.back();
    p.seq_kv = cu_kv.back();
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_kv = cu_kv.data();
    layout = Layout::kTND;
  }
  std::vector<std::int32_t> seqlens_kv(spec.cache_seqlens_kv.begin(), spec.cache_seqlens_kv.end());
  if (!seqlens_kv.empty()) {
    p.batch = static_cast<std::int64_t>(seqlens_kv.size());
    p.seqlens_kv = seqlens_kv.data();
  }
  const std::int64_t B = varlen ? 1 : p.batch, H = p.num_heads, Hkv = p.kv_heads(), Sq = p.seq_q, Skv = p.seq_kv,
                     D = p.head_dim;
  const std::size_t es = dtype_size(spec.dtype);
  const DType out_dtype = is_fp8(spec.dtype) ? spec.out_dtype : spec.dtype;
  HostBuffer q(B * H * Sq * D * es), k(B * Hkv * Skv * D * es), v(B * Hkv * Skv * D * es),
      o(B * H * Sq * D * dtype_size(out_dtype));
  fill_normal(q.data(), spec.dtype, B * H * Sq * D, spec.seed * 4 + 0, spec.input_scale);
  fill_normal(k.data(), spec.dtype, B * Hkv * Skv * D, spec.seed * 4 + 1, spec.input_scale);
  fill_normal(v.data(), spec.dtype, B * Hkv * Skv * D, spec.seed * 4 + 2, 1.0);
  if (!seqlens_kv.empty()) {  // the cache past each sequence's keys: NaN, never to be read
    const TensorView kv = make_view(nullptr, spec.dtype, layout, B, Hkv, Skv, D);
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < Hkv; ++h) {
        for (std::int64_t j = seqlens_kv[static_cast<std::size_t>(b)]; j < Skv; ++j) {
          for (std::int64_t d = 0; d < D; ++d) {
            detail::store_from_f32(k.data(), spec.dtype, kv.offset(b, h, j, d), std::numeric_limits<float>::quiet_NaN());
            detail::store_from_f32(v.data(), spec.dtype, kv.offset(b, h, j, d), std::numeric_limits<float>::quiet_NaN());
          }
        }
      }
    }
  }
  // O starts as NaN so an element the kernel forgets to write shows up.
  for (std::int64_t i = 0; i < B * H * Sq * D; ++i) {
    detail::store_from_f32(o.data(), out_dtype, i, std::numeric_limits<float>::quiet_NaN());
  }

  std::vector<std::int8_t> mask;
  p.causal = !p.sparse_mode && (spec.mask == MaskMode::kCausal || spec.mask == MaskMode::kCausalAndExplicit);
  std::vector<float> sinks;
  if (spec.with_sinks) {
    NormalRng rng(spec.seed * 4 + 5);
    for (std::int64_t h = 0; h < H; ++h) sinks.push_back(static_cast<float>(rng.next() * 2.0));
    p.sinks = sinks.data();
  }
  std::vector<float> descales[3];  // Q, K, V
  if (spec.descale) {
    NormalRng rng(spec.seed * 4 + 7);
    const std::int64_t heads[3] = {H, Hkv, Hkv};
    for (int i = 0; i < 3; ++i) {
      for (std::int64_t h = 0; h < (spec.descale == 1 ? 1 : heads[i]); ++h) {
        descales[i].push_back(static_cast<float>(0.25 + 0.75 * rng.next_uniform()));
      }
    }
    p.descale_q = descales[0].data();
    p.descale_k = descales[1].data();
    p.descale_v = descales[2].data();
    p.descale_q_count = static_cast<std::int64_t>(descales[0].size());
    p.descale_k_count = p.descale_v_count = static_cast<std::int64_t>(descales[1].size());
  }
  std::vector<float> slopes, bias;
  if (spec.with_alibi) {
    for (std::int64_t h = 0; h < H; ++h) slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(H)));
    p.alibi_slopes = slopes.data();
  }
  if (spec.bias_heads > 0) {
    NormalRng rng(spec.seed * 4 + 6);
    bias.resize(static_cast<std::size_t>(spec.bias_heads * Sq * Skv));
    for (float& x : bias) x = static_cast<float>(rng.next());
    p.bias = bias.data();
    p.bias_heads = spec.bias_heads;
  }
  if (spec.mask == MaskMode::kExplicit || spec.mask == MaskMode::kCausalAndExplicit) {
    // Random 80% density, plus whole rows masked out to exercise the -inf row.
    NormalRng rng(spec.seed * 4 + 3);
    mask.resize(static_cast<std::size_t>(Sq * Skv));
    for (std::int64_t i = 0; i < Sq; ++i) {
      const bool dead_row = i % 7 == 3;
      for (std::int64_t j = 0; j < Skv; ++j) {
        mask[i * Skv + j] = (!dead_row && rng.next_uniform() < 0.8) ? 1 : 0;
      }
    }
    p.mask = mask.data();
  }

  AttentionTensors t;
  t.q = make_view(q.data(), spec.dtype, layout, B, H, Sq, D);
  t.k = make_view(k.data(), spec.dtype, layout, B, Hkv, Skv, D);
  t.v = make_view(v.data(), spec.dtype, layout, B, Hkv, Skv, D);
  QuantizedCache quantized;
  if (spec.kv_dtype) {
    if (Status s = quantize_cache(t.k, t.v, layout, *spec.kv_dtype, &quantized); !s.ok()) return CaseResult{s};
    quantized.bind(p, t);
  }
  PagedCache paged;
  HostBuffer k_pool, v_pool, k_scale_pool, v_scale_pool;
  if (spec.paged_block_size > 0) {
    paged = make_paged_cache(B, Skv, spec.paged_block_size, spec.seed * 4 + 8, 2);
    k_pool = scatter_to_pool(paged, t.k, layout, p.seqlens_kv);
    v_pool = scatter_to_pool(paged, t.v, layout, p.seqlens_kv);
    if (t.k_scale.data) {  // an int8 cache's scales, paged like its rows
      k_scale_pool = scatter_to_pool(paged, t.k_scale, layout, p.seqlens_kv);
      v_scale_pool = scatter_to_pool(paged, t.v_scale, layout, p.seqlens_kv);
      t.k_scale = make_view(k_scale_pool.data(), DType::kF32, layout, 1, Hkv, paged.pool_tokens(), 1);
      t.v_scale = make_view(v_scale_pool.data(), DType::kF32, layout, 1, Hkv, paged.pool_tokens(), 1);
    }
    for (std::int64_t b = 0; b < B && p.seqlens_kv; ++b) {  // entries past a sequence's blocks are never read
      for (std::int64_t n = (p.seqlens_kv[b] + paged.block_size - 1) / paged.block_size; n < paged.blocks_per_seq; ++n) {
        paged.block_table[static_cast<std::size_t>(b * paged.blocks_per_seq + n)] = -1;
      }
    }
    paged.bind(p);
    t.k = make_view(k_pool.data(), t.k.dtype, layout, 1, Hkv, paged.pool_tokens(), D);
    t.v = make_view(v_pool.data(), t.v.dtype, layout, 1, Hkv, paged.pool_tokens(), D);
  }
  t.o = make_view(o.data(), out_dtype, layout, B, H, Sq, D);
  std::vector<float> lse(static_cast<std::size_t>(B * H * Sq), std::numeric_limits<float>::quiet_NaN());
  t.lse = lse.data();

  CaseResult r;
  r.status = forward(p, t);
  if (!r.status.ok()) return r;

  std::vector<double> ref(static_cast<std::size_t>(B * Sq * H * D)), ref_lse(static_cast<std::size_t>(B * H * Sq));
  if (Status s = reference_forward(p, t, ref.data(), ref_lse.data()); !s.ok()) {
    r.status = s;
    return r;
  }

  double err2 = 0.0, ref2 = 0.0;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t i = 0; i < Sq; ++i) {
        for (std::int64_t d = 0; d < D; ++d) {
          const double got = detail::load_as_f32(o.data(), out_dtype, t.o.offset(b, h, i, d));
          const double want = ref[((b * Sq + i) * H + h) * D + d];
          if (!std::isfinite(got)) {
            ++r.nonfinite;
            continue;
          }
          const double e = std::abs(got - want);
          r.max_abs_error = std::max(r.max_abs_error, e);
          err2 += e * e;
          ref2 += want * want;
        }
      }
    }
  }
  r.rel_l2_error = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  for (std::size_t i = 0; i < lse.size(); ++i) {
    const double want = ref_lse[i], got = lse[i];
    if (std::isinf(want) && want < 0) {
      if (!(std::isinf(got) && got < 0)) r.lse_max_error = std::numeric_limits<double>::infinity();
      continue;
    }
    if (!std::isfinite(got)) {
      ++r.nonfinite;
      continue;
    }
    r.lse_max_error = std::max(r.lse_max_error, std::abs(got - want) / (1.0 + std::abs(want)));
  }
  r.passed = r.nonfinite == 0 && r.rel_l2_error <= rel_l2_bound(spec.dtype) && r.lse_max_error <= lse_bound(spec.dtype);
  if (spec.accuracy_rule) {
    std::vector<double> same(ref.size());
    if (Status s = same_dtype_attention(p, t, spec.dtype, true, same.data()); !s.ok()) {
      r.status = s;
      return r;
    }
    // FlashAttention's own rule: the max error is at most twice that of the
    // same computation done plainly in the dtype.
    for (std::size_t i = 0; i < ref.size(); ++i) {
      r.yardstick_max_abs = std::max(r.yardstick_max_abs, std::abs(same[i] - ref[i]));
    }
    r.passed = r.passed && r.max_abs_error <= 2.0 * r.yardstick_max_abs;
  }
  if (backward) {
    check_gradients(spec, p, t, layout, backward, &r);
    r.passed = r.passed && r.status.ok() && r.nonfinite == 0 && r.grads_passed;
  }
  return r;
}

}  // namespace fa::cli
