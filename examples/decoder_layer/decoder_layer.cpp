#include "decoder_layer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include <oneapi/dnnl/dnnl.hpp>

#include "glu/glu.h"
#include "layer_norm/layer_norm.h"
#include "rope/rope.h"

namespace fa::example {
namespace {

std::size_t elem_bytes(DType d) { return d == DType::kF32 ? 4 : 2; }

// fp32 -> the stored dtype and back (bf16: nearest even), for the weights'
// and input's values as the layer and the reference both see them.
std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A 64-byte aligned buffer of `count` elements of `dtype`.
struct Buffer {
  DType dtype = DType::kF32;
  std::int64_t count = 0;
  std::unique_ptr<char, decltype(&std::free)> bytes{nullptr, &std::free};
  Buffer() = default;
  Buffer(DType d, std::int64_t n)
      : dtype(d), count(n), bytes(static_cast<char*>(std::aligned_alloc(64, (static_cast<std::size_t>(n) * elem_bytes(d) + 63) / 64 * 64)), &std::free) {
    if (!bytes) throw std::bad_alloc();
  }
  void* data() const { return bytes.get(); }
  float get(std::int64_t i) const {
    return dtype == DType::kF32 ? reinterpret_cast<const float*>(data())[i] : from_bf16(reinterpret_cast<const std::uint16_t*>(data())[i]);
  }
  void set(std::int64_t i, float v) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(data())[i] = v;
    } else {
      reinterpret_cast<std::uint16_t*>(data())[i] = to_bf16(v);
    }
  }
};

// Normal values times `scale`, rounded to the dtype: `stored` holds them,
// `values` their fp32 copy.
void fill(Buffer& stored, std::vector<float>* values, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  if (values) values->resize(static_cast<std::size_t>(stored.count));
  for (std::int64_t i = 0; i < stored.count; ++i) {
    stored.set(i, static_cast<float>(normal(rng)));
    if (values) (*values)[static_cast<std::size_t>(i)] = stored.get(i);
  }
}

dnnl::memory::data_type dnnl_type(DType d) { return d == DType::kF32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16; }

// oneDNN's refusal in one line.  A matmul it has no kernel for on this CPU
// (dnnl_unimplemented: bf16 on a CPU without AVX-512, in oneDNN 2.x) is
// named so, with the dtype that runs instead.
std::string onednn_refusal(const dnnl::error& e, DType dt) {
  if (e.status != dnnl_unimplemented) return std::string("oneDNN: ") + e.what();
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + " has no " + std::string(dtype_name(dt)) +
         " matmul on this CPU (" + e.what() + "); --dtype=fp32 runs here";
}

// y[M, N] = x[M, K] · W[K, N] (+ y's values with `accumulate`: the residual
// add as oneDNN's sum post-op), W reordered once into oneDNN's own layout.
struct Gemm {
  dnnl::matmul prim;
  dnnl::memory weights;
  dnnl::memory::desc src_md, dst_md;
  void run(dnnl::engine& eng, dnnl::stream& s, const void* x, void* y) {
    dnnl::memory src(src_md, eng, const_cast<void*>(x)), dst(dst_md, eng, y);
    prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    s.wait();
  }
};

Gemm make_gemm(dnnl::engine& eng, dnnl::stream& s, std::int64_t m, std::int64_t k, std::int64_t n, DType dt, const Buffer& w,
               bool accumulate) {
  using tag = dnnl::memory::format_tag;
  Gemm g;
  g.src_md = dnnl::memory::desc({m, k}, dnnl_type(dt), tag::ab);
  g.dst_md = dnnl::memory::desc({m, n}, dnnl_type(dt), tag::ab);
  const dnnl::memory::desc w_any({k, n}, dnnl_type(dt), tag::any), w_user({k, n}, dnnl_type(dt), tag::ab);
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(g.src_md, w_any, g.dst_md), attr, eng);
  g.prim = dnnl::matmul(pd);
  dnnl::memory user(w_user, eng, w.data());
  g.weights = dnnl::memory(pd.weights_desc(), eng);
  dnnl::reorder(user, g.weights).execute(s, user, g.weights);
  s.wait();
  return g;
}

// A [1, heads, tokens, head_dim] view of heads [first, first + heads) of a
// [tokens, row] matrix (the fused QKV projection's output).
TensorView head_view(void* data, DType dt, std::int64_t tokens, std::int64_t row, std::int64_t first, std::int64_t heads,
                     std::int64_t head_dim) {
  TensorView v;
  v.data = static_cast<char*>(data) + static_cast<std::size_t>(first * head_dim) * elem_bytes(dt);
  v.dtype = dt;
  v.shape[0] = 1;
  v.shape[1] = heads;
  v.shape[2] = tokens;
  v.shape[3] = head_dim;
  v.strides[0] = tokens * row;
  v.strides[1] = head_dim;
  v.strides[2] = row;
  v.strides[3] = 1;
  return v;
}

// [m, n] = a[m, k] · w[k, n] in double, rounded to fp32 (the reference's
// matmul; plain loops, not a GEMM library).
std::vector<float> matmul_reference(const std::vector<float>& a, const std::vector<float>& w, std::int64_t m, std::int64_t k, std::int64_t n) {
  std::vector<float> out(static_cast<std::size_t>(m * n));
  std::vector<double> row(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    for (std::int64_t p = 0; p < k; ++p) {
      const double x = a[static_cast<std::size_t>(i * k + p)];
      const float* wr = w.data() + p * n;
      for (std::int64_t j = 0; j < n; ++j) row[static_cast<std::size_t>(j)] += x * wr[j];
    }
    for (std::int64_t j = 0; j < n; ++j) out[static_cast<std::size_t>(i * n + j)] = static_cast<float>(row[static_cast<std::size_t>(j)]);
  }
  return out;
}

}  // namespace

void quiet_openmp_waits() { setenv("OMP_WAIT_POLICY", "passive", 0); }

std::array<double, kDecoderStages> stage_flops(const DecoderConfig& c) {
  const double t = static_cast<double>(c.tokens), h = static_cast<double>(c.hidden), d = static_cast<double>(c.head_dim);
  const double q = static_cast<double>(c.heads) * d, kv = static_cast<double>(c.kv_heads) * d, i = static_cast<double>(c.intermediate);
  // Causal attention: about half of the T x T scores, two products each.
  const double attention = 2.0 * 2.0 * static_cast<double>(c.heads) * d * t * (t + 1) / 2;
  return {0, 2 * t * h * (q + 2 * kv), 0, attention, 2 * t * q * h, 0, 2 * t * h * 2 * i, 0, 2 * t * i * h};
}

struct DecoderLayer::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  Buffer x, xn, qkv, o, attn, h, hn, gu, act, out;
  Buffer w[4];
  std::vector<float> w_values[4], gamma[2];
  Gemm gemm[4];
};

DecoderLayer::~DecoderLayer() = default;

const void* DecoderLayer::input() const { return impl_->x.data(); }
const void* DecoderLayer::output() const { return impl_->out.data(); }
const std::vector<float>& DecoderLayer::weight(int which) const { return impl_->w_values[which]; }
const std::vector<float>& DecoderLayer::norm_gamma(int which) const { return impl_->gamma[which]; }

Status DecoderLayer::create(const DecoderConfig& c, std::unique_ptr<DecoderLayer>* out) {
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF32) return Status::Invalid("dtype must be bf16 or fp32 (oneDNN's matmul dtypes here)");
  if (c.tokens < 1 || c.hidden < 1 || c.heads < 1 || c.kv_heads < 1 || c.head_dim < 2 || c.intermediate < 1) {
    return Status::Invalid("tokens, hidden, heads, kv_heads, intermediate must be >= 1 and head_dim >= 2");
  }
  if (c.heads % c.kv_heads != 0) return Status::Invalid("kv_heads must divide heads (GQA)");
  std::unique_ptr<DecoderLayer> layer(new DecoderLayer());
  layer->config_ = c;
  layer->impl_ = std::make_unique<Impl>();
  Impl& m = *layer->impl_;
  const std::int64_t t = c.tokens, qkv_width = (c.heads + 2 * c.kv_heads) * c.head_dim, q_width = c.heads * c.head_dim;
  try {
    m.x = Buffer(c.dtype, t * c.hidden);
    m.xn = Buffer(c.dtype, t * c.hidden);
    m.qkv = Buffer(c.dtype, t * qkv_width);
    m.o = Buffer(c.dtype, t * q_width);
    m.attn = Buffer(c.dtype, t * c.hidden);
    m.h = Buffer(c.dtype, t * c.hidden);
    m.hn = Buffer(c.dtype, t * c.hidden);
    m.gu = Buffer(c.dtype, t * 2 * c.intermediate);
    m.act = Buffer(c.dtype, t * c.intermediate);
    m.out = Buffer(c.dtype, t * c.hidden);
    const std::int64_t dims[4][2] = {{c.hidden, qkv_width}, {q_width, c.hidden}, {c.hidden, 2 * c.intermediate}, {c.intermediate, c.hidden}};
    std::mt19937_64 rng(c.seed);
    fill(m.x, nullptr, rng, 1.0);
    for (int i = 0; i < 4; ++i) {
      m.w[i] = Buffer(c.dtype, dims[i][0] * dims[i][1]);
      // 1/sqrt(K): each projection keeps its input's scale.
      fill(m.w[i], &m.w_values[i], rng, 1.0 / std::sqrt(static_cast<double>(dims[i][0])));
    }
    std::normal_distribution<double> near_one(1.0, 0.1);
    for (auto& g : m.gamma) {
      g.resize(static_cast<std::size_t>(c.hidden));
      for (float& v : g) v = static_cast<float>(near_one(rng));
    }
    m.gemm[0] = make_gemm(m.eng, m.stream, t, c.hidden, qkv_width, c.dtype, m.w[0], false);
    m.gemm[1] = make_gemm(m.eng, m.stream, t, q_width, c.hidden, c.dtype, m.w[1], false);
    m.gemm[2] = make_gemm(m.eng, m.stream, t, c.hidden, 2 * c.intermediate, c.dtype, m.w[2], false);
    m.gemm[3] = make_gemm(m.eng, m.stream, t, c.intermediate, c.hidden, c.dtype, m.w[3], true);
  } catch (const dnnl::error& e) {
    // No kernel for the dtype on this CPU: Unsupported (the example skips);
    // anything else oneDNN refuses while building the layer is an argument
    // it did not take.
    if (e.status == dnnl_unimplemented) return Status::Unsupported(onednn_refusal(e, c.dtype));
    return Status::Invalid(onednn_refusal(e, c.dtype));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("decoder layer: could not allocate its weights and activations");
  }
  *out = std::move(layer);
  return Status::Ok();
}

Status DecoderLayer::run(std::array<double, kDecoderStages>* stage_ms) {
  const DecoderConfig& c = config_;
  Impl& m = *impl_;
  const std::int64_t t = c.tokens, qkv_width = (c.heads + 2 * c.kv_heads) * c.head_dim;
  auto rows = [&](const Buffer& b, std::int64_t width) { return RowsView{b.data(), c.dtype, t, width, 0}; };
  int stage = 0;
  auto lap = [&, last = std::chrono::steady_clock::now()]() mutable {
    const auto now = std::chrono::steady_clock::now();
    if (stage_ms) (*stage_ms)[static_cast<std::size_t>(stage)] = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    ++stage;
  };
  try {
    NormParams norm;
    norm.kind = NormKind::kRmsNorm;
    norm.eps = c.eps;
    norm.threads = c.threads;
    NormTensors n1;
    n1.x = rows(m.x, c.hidden);
    n1.y = rows(m.xn, c.hidden);
    n1.gamma = m.gamma[0].data();
    if (Status s = norm_forward(norm, n1); !s.ok()) return s;
    lap();
    m.gemm[0].run(m.eng, m.stream, m.xn.data(), m.qkv.data());
    lap();
    RopeParams rope;
    rope.base = c.rope_base;
    rope.threads = c.threads;
    RopeTensors rt;
    rt.q = head_view(m.qkv.data(), c.dtype, t, qkv_width, 0, c.heads, c.head_dim);
    rt.k = head_view(m.qkv.data(), c.dtype, t, qkv_width, c.heads, c.kv_heads, c.head_dim);
    if (Status s = rope_forward(rope, rt); !s.ok()) return s;
    lap();
    AttentionParams ap;
    ap.batch = 1;
    ap.seq_q = ap.seq_kv = t;
    ap.num_heads = c.heads;
    ap.num_kv_heads = c.kv_heads;
    ap.head_dim = c.head_dim;
    ap.causal = true;
    ap.threads = c.threads;
    AttentionTensors at;
    at.q = rt.q;
    at.k = rt.k;
    at.v = head_view(m.qkv.data(), c.dtype, t, qkv_width, c.heads + c.kv_heads, c.kv_heads, c.head_dim);
    at.o = make_view(m.o.data(), c.dtype, Layout::kBSH, 1, c.heads, t, c.head_dim);
    if (Status s = fa2_forward(ap, at); !s.ok()) return s;
    lap();
    m.gemm[1].run(m.eng, m.stream, m.o.data(), m.attn.data());
    lap();
    NormTensors n2;  // h = attn + x, hn = rmsnorm(h): the fused residual
    n2.x = rows(m.attn, c.hidden);
    n2.residual = rows(m.x, c.hidden);
    n2.sum = rows(m.h, c.hidden);
    n2.y = rows(m.hn, c.hidden);
    n2.gamma = m.gamma[1].data();
    if (Status s = norm_forward(norm, n2); !s.ok()) return s;
    lap();
    m.gemm[2].run(m.eng, m.stream, m.hn.data(), m.gu.data());
    lap();
    GluParams glu;
    glu.threads = c.threads;
    GluTensors gt{rows(m.gu, 2 * c.intermediate), rows(m.act, c.intermediate)};
    if (Status s = glu_forward(glu, gt); !s.ok()) return s;
    lap();
    // out = h, then out += act · Wdown (oneDNN's sum post-op).
    std::memcpy(m.out.data(), m.h.data(), static_cast<std::size_t>(t * c.hidden) * elem_bytes(c.dtype));
    m.gemm[3].run(m.eng, m.stream, m.act.data(), m.out.data());
    lap();
  } catch (const dnnl::error& e) {
    return Status::Unsupported(std::string("oneDNN: ") + e.what());
  }
  return Status::Ok();
}

Status decoder_reference(const DecoderLayer& layer, std::vector<double>* out) {
  const DecoderConfig& c = layer.config();
  const std::int64_t t = c.tokens, qkv_width = (c.heads + 2 * c.kv_heads) * c.head_dim, q_width = c.heads * c.head_dim;
  Buffer in_view(DType::kF32, t * c.hidden);
  for (std::int64_t i = 0; i < t * c.hidden; ++i) {
    in_view.set(i, c.dtype == DType::kF32 ? static_cast<const float*>(layer.input())[i]
                                          : from_bf16(static_cast<const std::uint16_t*>(layer.input())[i]));
  }
  const float* x = static_cast<const float*>(in_view.data());
  std::vector<double> tmp;
  auto to_float = [](const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); };
  auto frows = [&](const float* p, std::int64_t width) { return RowsView{const_cast<float*>(p), DType::kF32, t, width, 0}; };
  NormParams norm;
  norm.kind = NormKind::kRmsNorm;
  norm.eps = c.eps;
  NormTensors n1;
  n1.x = frows(x, c.hidden);
  n1.gamma = layer.norm_gamma(0).data();
  tmp.resize(static_cast<std::size_t>(t * c.hidden));
  if (Status s = norm_reference(norm, n1, tmp.data(), nullptr, nullptr); !s.ok()) return s;
  std::vector<float> qkv = matmul_reference(to_float(tmp), layer.weight(0), t, c.hidden, qkv_width);
  // RoPE on Q and K (in the fp32 copy), through its reference.
  RopeParams rope;
  rope.base = c.rope_base;
  RopeTensors rt;
  rt.q = head_view(qkv.data(), DType::kF32, t, qkv_width, 0, c.heads, c.head_dim);
  rt.k = head_view(qkv.data(), DType::kF32, t, qkv_width, c.heads, c.kv_heads, c.head_dim);
  std::vector<double> q_rot(static_cast<std::size_t>(q_width * t)), k_rot(static_cast<std::size_t>(c.kv_heads * c.head_dim * t));
  if (Status s = rope_reference(rope, rt, q_rot.data(), k_rot.data()); !s.ok()) return s;
  for (const auto& [view, rot] : {std::pair{&rt.q, &q_rot}, std::pair{&rt.k, &k_rot}}) {
    for (std::int64_t hd = 0; hd < view->shape[1]; ++hd) {
      for (std::int64_t s = 0; s < t; ++s) {
        for (std::int64_t d = 0; d < c.head_dim; ++d) {
          static_cast<float*>(view->data)[view->offset(0, hd, s, d)] =
              static_cast<float>((*rot)[static_cast<std::size_t>((hd * t + s) * c.head_dim + d)]);
        }
      }
    }
  }
  AttentionParams ap;
  ap.batch = 1;
  ap.seq_q = ap.seq_kv = t;
  ap.num_heads = c.heads;
  ap.num_kv_heads = c.kv_heads;
  ap.head_dim = c.head_dim;
  ap.causal = true;
  AttentionTensors at;
  at.q = rt.q;
  at.k = rt.k;
  at.v = head_view(qkv.data(), DType::kF32, t, qkv_width, c.heads + c.kv_heads, c.kv_heads, c.head_dim);
  std::vector<float> o_buf(static_cast<std::size_t>(t * q_width));
  at.o = make_view(o_buf.data(), DType::kF32, Layout::kBSH, 1, c.heads, t, c.head_dim);
  tmp.resize(static_cast<std::size_t>(t * q_width));
  if (Status s = reference_forward(ap, at, tmp.data(), nullptr); !s.ok()) return s;  // [1, T, H, D]: BSH rows
  const std::vector<float> attn = matmul_reference(to_float(tmp), layer.weight(1), t, q_width, c.hidden);
  std::vector<float> h(static_cast<std::size_t>(t * c.hidden));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = attn[i] + x[i];  // fp32, as the fused norm's sum in x's dtype
  NormTensors n2;
  n2.x = frows(h.data(), c.hidden);
  n2.gamma = layer.norm_gamma(1).data();
  tmp.resize(static_cast<std::size_t>(t * c.hidden));
  if (Status s = norm_reference(norm, n2, tmp.data(), nullptr, nullptr); !s.ok()) return s;
  std::vector<float> gu = matmul_reference(to_float(tmp), layer.weight(2), t, c.hidden, 2 * c.intermediate);
  GluTensors gt;
  gt.x = frows(gu.data(), 2 * c.intermediate);
  tmp.resize(static_cast<std::size_t>(t * c.intermediate));
  if (Status s = glu_reference(GluParams{}, gt, tmp.data()); !s.ok()) return s;
  const std::vector<float> down = matmul_reference(to_float(tmp), layer.weight(3), t, c.intermediate, c.hidden);
  out->resize(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) (*out)[i] = static_cast<double>(h[i]) + down[i];
  return Status::Ok();
}

DecoderCheck check_decoder(const DecoderLayer& layer) {
  DecoderCheck r;
  const DecoderConfig& c = layer.config();
  std::vector<double> ref;
  if (!decoder_reference(layer, &ref).ok()) return r;
  auto value = [&](const void* p, std::int64_t i) {
    return c.dtype == DType::kF32 ? static_cast<double>(static_cast<const float*>(p)[i])
                                  : static_cast<double>(from_bf16(static_cast<const std::uint16_t*>(p)[i]));
  };
  double err2 = 0, branch2 = 0;
  for (std::int64_t i = 0; i < c.tokens * c.hidden; ++i) {
    const double got = value(layer.output(), i), want = ref[static_cast<std::size_t>(i)];
    if (!std::isfinite(got)) {
      ++r.nonfinite;
      continue;
    }
    const double branch = want - value(layer.input(), i);  // what the layer added to x
    err2 += (got - want) * (got - want);
    branch2 += branch * branch;
    r.max_abs_error = std::max(r.max_abs_error, std::fabs(got - want));
  }
  r.rel_error = branch2 > 0 ? std::sqrt(err2 / branch2) : std::sqrt(err2);
  r.bound = c.dtype == DType::kF32 ? kDecoderBoundF32 : kDecoderBoundBF16;
  r.pass = r.nonfinite == 0 && r.rel_error <= r.bound;
  return r;
}

}  // namespace fa::example
