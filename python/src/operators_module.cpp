// The other operators in ops_transformer._core: LayerNorm and RMSNorm (with
// the fused residual add), RoPE and the gated linear units, each bound where
// its library is built (FA_PY_LAYER_NORM, FA_PY_ROPE, FA_PY_GLU).  As in
// core_module.cpp: the Python layer hands over views and names dtypes; here
// the views are checked and the library called with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"

#if FA_PY_LAYER_NORM
#include "layer_norm/layer_norm.h"
#endif
#if FA_PY_ROPE
#include "rope/rope.h"
#endif
#if FA_PY_GLU
#include "glu/glu.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace fa_py {
namespace {

// A 2-D view [rows, hidden] with a contiguous last dimension.
template <typename Array>
fa::RowsView rows_of(const Array& a, const std::string& dtype, const char* what) {
  if (a.ndim() != 2) {
    throw nb::value_error((std::string(what) + ": expected a 2-D view [rows, hidden], got " + std::to_string(a.ndim()) +
                           " dimensions").c_str());
  }
  const fa::DType dt = dtype_named(dtype, what);
  if (a.itemsize() != fa::dtype_size(dt)) {
    throw nb::type_error((std::string(what) + ": elements of " + std::to_string(a.itemsize()) + " bytes, expected " +
                          dtype).c_str());
  }
  if (a.shape(1) > 1 && a.stride(1) != 1) {
    throw nb::value_error((std::string(what) + ": the last dimension must be contiguous (stride " +
                           std::to_string(a.stride(1)) + ")").c_str());
  }
  fa::RowsView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dt;
  v.rows = static_cast<std::int64_t>(a.shape(0));
  v.hidden = static_cast<std::int64_t>(a.shape(1));
  v.row_stride = a.shape(0) > 1 ? a.stride(0) : v.hidden;
  return v;
}

template <typename T>
T* vector_data(const std::optional<Out>& a, std::int64_t n, const char* what) {
  if (!a) return nullptr;
  if (a->dtype() != nb::dtype<T>() || static_cast<std::int64_t>(a->size()) != n || !row_major(*a)) {
    throw nb::value_error((std::string(what) + ": expected a contiguous float32 array of " + std::to_string(n) +
                           " elements").c_str());
  }
  return static_cast<T*>(a->data());
}

std::optional<fa::Isa> isa_named(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  if (auto isa = fa::parse_isa(*name)) return isa;
  throw nb::value_error(("isa: '" + *name + "' (expected generic, avx2, avx512, avx512bf16 or amx)").c_str());
}

#if FA_PY_LAYER_NORM
void norm(const std::string& kind, const In& x, const std::string& x_dtype, const Out& y, const std::string& y_dtype,
          const std::optional<In>& residual, const std::optional<Out>& sum, const std::optional<In>& gamma,
          const std::optional<In>& beta, const std::string& param_dtype, const std::optional<Out>& mean,
          const std::optional<Out>& rstd, std::optional<float> eps, int threads, const std::optional<std::string>& isa) {
  fa::NormParams p;
  if (kind != "layer_norm" && kind != "rms_norm") {
    throw nb::value_error(("kind: '" + kind + "' (expected layer_norm or rms_norm)").c_str());
  }
  p.kind = kind == "layer_norm" ? fa::NormKind::kLayerNorm : fa::NormKind::kRmsNorm;
  p.eps = eps;
  p.threads = threads;
  p.isa = isa_named(isa);
  fa::NormTensors t;
  t.x = rows_of(x, x_dtype, "x");
  t.y = rows_of(y, y_dtype, "out");
  if (residual) t.residual = rows_of(*residual, x_dtype, "residual");
  if (sum) t.sum = rows_of(*sum, x_dtype, "sum");
  const fa::DType pd = dtype_named(param_dtype, "weight");
  for (const auto& [param, target, what] : {std::tuple{&gamma, &t.gamma, "weight"}, std::tuple{&beta, &t.beta, "bias"}}) {
    if (!*param) continue;
    const In& a = **param;
    if (a.ndim() != 1 || static_cast<std::int64_t>(a.shape(0)) != t.x.hidden || a.itemsize() != fa::dtype_size(pd) ||
        !row_major(a)) {
      throw nb::value_error((std::string(what) + ": expected a contiguous vector of hidden = " +
                             std::to_string(t.x.hidden) + " elements of " + param_dtype).c_str());
    }
    *target = a.data();
  }
  t.param_dtype = pd;
  t.mean = vector_data<float>(mean, t.x.rows, "mean");
  t.rstd = vector_data<float>(rstd, t.x.rows, "rstd");
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::norm_forward(p, t);
  }
  raise_if_error(s);
}

nb::ndarray<nb::numpy, double> norm_ref(const std::string& kind, const In& x, const std::string& x_dtype,
                                        const std::optional<In>& residual, const std::optional<In>& gamma,
                                        const std::optional<In>& beta, const std::string& param_dtype,
                                        std::optional<float> eps) {
  fa::NormParams p;
  p.kind = kind == "layer_norm" ? fa::NormKind::kLayerNorm : fa::NormKind::kRmsNorm;
  p.eps = eps;
  fa::NormTensors t;
  t.x = rows_of(x, x_dtype, "x");
  t.y = t.x;  // shape only: the reference writes doubles
  if (residual) t.residual = rows_of(*residual, x_dtype, "residual");
  if (gamma) t.gamma = gamma->data();
  if (beta) t.beta = beta->data();
  t.param_dtype = dtype_named(param_dtype, "weight");
  const std::size_t n = static_cast<std::size_t>(t.x.rows * t.x.hidden);
  auto y = zeros(n);
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::norm_reference(p, t, y.get(), nullptr, nullptr);
  }
  raise_if_error(s);
  return numpy_f64(std::move(y), {static_cast<std::size_t>(t.x.rows), static_cast<std::size_t>(t.x.hidden)});
}
#endif

#if FA_PY_ROPE
struct RopeCall {
  fa::RopeParams p;
  fa::RopeTensors t;
};

RopeCall rope_call(const std::optional<In>& q, const std::optional<In>& k, const std::string& dtype,
                   const std::string& mode, std::int64_t rotary_dim, double base, const std::string& scaling,
                   double factor, double low_freq_factor, double high_freq_factor, double original_max_position,
                   const std::optional<In>& positions, const std::optional<In>& cos, const std::optional<In>& sin,
                   const std::optional<In>& cu_seqlens, int threads, const std::optional<std::string>& isa) {
  RopeCall c;
  fa::RopeParams& p = c.p;
  if (mode == "rotate_half") {
    p.mode = fa::RopeMode::kRotateHalf;
  } else if (mode == "interleaved") {
    p.mode = fa::RopeMode::kInterleaved;
  } else {
    throw nb::value_error(("mode: '" + mode + "' (expected rotate_half or interleaved)").c_str());
  }
  if (scaling == "none") {
    p.scaling = fa::RopeScaling::kNone;
  } else if (scaling == "linear") {
    p.scaling = fa::RopeScaling::kLinear;
  } else if (scaling == "ntk") {
    p.scaling = fa::RopeScaling::kNtk;
  } else if (scaling == "llama3") {
    p.scaling = fa::RopeScaling::kLlama3;
  } else {
    throw nb::value_error(("scaling: '" + scaling + "' (expected none, linear, ntk or llama3)").c_str());
  }
  p.rotary_dim = rotary_dim;
  p.base = base;
  p.factor = factor;
  p.low_freq_factor = low_freq_factor;
  p.high_freq_factor = high_freq_factor;
  p.original_max_position = original_max_position;
  p.threads = threads;
  p.isa = isa_named(isa);
  const fa::DType dt = dtype_named(dtype, "q");
  if (q) c.t.q = view_of(*q, dt, "q");
  if (k) c.t.k = view_of(*k, dt, "k");
  if (cu_seqlens) {
    p.cu_seqlens = aux<std::int32_t>(*cu_seqlens, "cu_seqlens", {-1});
    p.num_sequences = static_cast<std::int64_t>(cu_seqlens->shape(0)) - 1;
  }
  const fa::TensorView& shape = q ? c.t.q : c.t.k;
  if (positions) {
    const std::int64_t tokens = p.cu_seqlens ? shape.shape[2] : shape.shape[0] * shape.shape[2];
    c.t.positions = aux<std::int64_t>(*positions, "positions", {tokens});
  }
  if (cos || sin) {
    if (!cos || !sin) throw nb::value_error("cos and sin: give both or neither");
    const std::int64_t half = (rotary_dim > 0 ? rotary_dim : shape.shape[3]) / 2;
    c.t.cos = aux<float>(*cos, "cos", {-1, half});
    c.t.sin = aux<float>(*sin, "sin", {static_cast<std::int64_t>(cos->shape(0)), half});
    c.t.table_positions = static_cast<std::int64_t>(cos->shape(0));
  }
  return c;
}

void rope(const std::optional<In>& q, const std::optional<In>& k, const std::optional<Out>& q_out,
          const std::optional<Out>& k_out, const std::string& dtype, const std::string& out_dtype,
          const std::string& mode, std::int64_t rotary_dim, double base, const std::string& scaling, double factor,
          double low_freq_factor, double high_freq_factor, double original_max_position,
          const std::optional<In>& positions, const std::optional<In>& cos, const std::optional<In>& sin,
          const std::optional<In>& cu_seqlens, int threads, const std::optional<std::string>& isa) {
  RopeCall c = rope_call(q, k, dtype, mode, rotary_dim, base, scaling, factor, low_freq_factor, high_freq_factor,
                         original_max_position, positions, cos, sin, cu_seqlens, threads, isa);
  const fa::DType od = dtype_named(out_dtype, "out");
  if (q_out) c.t.q_out = view_of(*q_out, od, "q_out");
  if (k_out) c.t.k_out = view_of(*k_out, od, "k_out");
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::rope_forward(c.p, c.t);
  }
  raise_if_error(s);
}

nb::tuple rope_ref(const std::optional<In>& q, const std::optional<In>& k, const std::string& dtype,
                   const std::string& mode, std::int64_t rotary_dim, double base, const std::string& scaling,
                   double factor, double low_freq_factor, double high_freq_factor, double original_max_position,
                   const std::optional<In>& positions, const std::optional<In>& cos, const std::optional<In>& sin,
                   const std::optional<In>& cu_seqlens) {
  RopeCall c = rope_call(q, k, dtype, mode, rotary_dim, base, scaling, factor, low_freq_factor, high_freq_factor,
                         original_max_position, positions, cos, sin, cu_seqlens, 0, std::nullopt);
  auto shape_of = [](const fa::TensorView& v) {
    return std::vector<std::size_t>{static_cast<std::size_t>(v.shape[0]), static_cast<std::size_t>(v.shape[1]),
                                    static_cast<std::size_t>(v.shape[2]), static_cast<std::size_t>(v.shape[3])};
  };
  auto count = [](const std::vector<std::size_t>& s) { return s[0] * s[1] * s[2] * s[3]; };
  std::unique_ptr<double[]> qo, ko;
  if (q) qo = zeros(count(shape_of(c.t.q)));
  if (k) ko = zeros(count(shape_of(c.t.k)));
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::rope_reference(c.p, c.t, qo.get(), ko.get());
  }
  raise_if_error(s);
  nb::object qr = nb::none(), kr = nb::none();
  if (q) qr = nb::cast(numpy_f64(std::move(qo), shape_of(c.t.q)));
  if (k) kr = nb::cast(numpy_f64(std::move(ko), shape_of(c.t.k)));
  return nb::make_tuple(qr, kr);
}
#endif

#if FA_PY_GLU
fa::GluParams glu_params(const std::string& kind, const std::string& split, int threads,
                         const std::optional<std::string>& isa) {
  fa::GluParams p;
  if (kind == "swiglu") {
    p.kind = fa::GluKind::kSwiGlu;
  } else if (kind == "geglu") {
    p.kind = fa::GluKind::kGeGluErf;
  } else if (kind == "geglu_tanh") {
    p.kind = fa::GluKind::kGeGluTanh;
  } else if (kind == "reglu") {
    p.kind = fa::GluKind::kReGlu;
  } else {
    throw nb::value_error(("kind: '" + kind + "' (expected swiglu, geglu, geglu_tanh or reglu)").c_str());
  }
  if (split == "gate_first") {
    p.split = fa::GluSplit::kGateFirst;
  } else if (split == "up_first") {
    p.split = fa::GluSplit::kUpFirst;
  } else {
    throw nb::value_error(("split: '" + split + "' (expected gate_first or up_first)").c_str());
  }
  p.threads = threads;
  p.isa = isa_named(isa);
  return p;
}

void glu(const std::string& kind, const In& x, const std::string& x_dtype, const Out& y, const std::string& y_dtype,
         const std::string& split, int threads, const std::optional<std::string>& isa) {
  const fa::GluParams p = glu_params(kind, split, threads, isa);
  fa::GluTensors t;
  t.x = rows_of(x, x_dtype, "x");
  t.y = rows_of(y, y_dtype, "out");
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::glu_forward(p, t);
  }
  raise_if_error(s);
}

nb::ndarray<nb::numpy, double> glu_ref(const std::string& kind, const In& x, const std::string& x_dtype,
                                       const std::string& split) {
  const fa::GluParams p = glu_params(kind, split, 0, std::nullopt);
  fa::GluTensors t;
  t.x = rows_of(x, x_dtype, "x");
  const std::size_t rows = static_cast<std::size_t>(t.x.rows), d = static_cast<std::size_t>(t.x.hidden / 2);
  auto y = zeros(rows * d);
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::glu_reference(p, t, y.get());
  }
  raise_if_error(s);
  return numpy_f64(std::move(y), {rows, d});
}
#endif

}  // namespace

void bind_operators(nb::module_& m) {
#if FA_PY_LAYER_NORM
  m.def("norm", &norm, "kind"_a, "x"_a, "x_dtype"_a, "out"_a, "out_dtype"_a, "residual"_a.none(), "sum"_a.none(),
        "weight"_a.none(), "bias"_a.none(), "param_dtype"_a, "mean"_a.none(), "rstd"_a.none(), "eps"_a.none(),
        "threads"_a, "isa"_a.none(), "LayerNorm or RMSNorm of x [rows, hidden] into out (the residual added first).");
  m.def("norm_reference", &norm_ref, "kind"_a, "x"_a, "x_dtype"_a, "residual"_a.none(), "weight"_a.none(),
        "bias"_a.none(), "param_dtype"_a, "eps"_a.none(), "The float64 reference of norm: y [rows, hidden].");
#endif
#if FA_PY_ROPE
  m.def("rope", &rope, "q"_a.none(), "k"_a.none(), "q_out"_a.none(), "k_out"_a.none(), "dtype"_a, "out_dtype"_a,
        "mode"_a, "rotary_dim"_a, "base"_a, "scaling"_a, "factor"_a, "low_freq_factor"_a, "high_freq_factor"_a,
        "original_max_position"_a, "positions"_a.none(), "cos"_a.none(), "sin"_a.none(), "cu_seqlens"_a.none(),
        "threads"_a, "isa"_a.none(), "Rotary position embedding of q and k ([batch, heads, seq, dim] views).");
  m.def("rope_reference", &rope_ref, "q"_a.none(), "k"_a.none(), "dtype"_a, "mode"_a, "rotary_dim"_a, "base"_a,
        "scaling"_a, "factor"_a, "low_freq_factor"_a, "high_freq_factor"_a, "original_max_position"_a,
        "positions"_a.none(), "cos"_a.none(), "sin"_a.none(), "cu_seqlens"_a.none(),
        "The float64 reference of rope: (q, k) [batch, heads, seq, dim] or None.");
#endif
#if FA_PY_GLU
  m.def("glu", &glu, "kind"_a, "x"_a, "x_dtype"_a, "out"_a, "out_dtype"_a, "split"_a, "threads"_a, "isa"_a.none(),
        "A gated linear unit of x [rows, 2d] into out [rows, d].");
  m.def("glu_reference", &glu_ref, "kind"_a, "x"_a, "x_dtype"_a, "split"_a,
        "The float64 reference of glu: y [rows, d].");
#endif
  m.attr("has_layer_norm") = bool(FA_PY_LAYER_NORM);
  m.attr("has_rope") = bool(FA_PY_ROPE);
  m.attr("has_glu") = bool(FA_PY_GLU);
}

}  // namespace fa_py
