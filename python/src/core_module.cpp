// ops_transformer._core: the library's C++ API as a Python extension
// (nanobind).  Deliberately thin: the Python layer (ops_transformer/*.py)
// turns NumPy arrays and DLPack tensors into 4-D views [batch, heads, seq,
// head_dim] with element strides, allocates the outputs in the caller's
// framework and names each tensor's dtype; this module checks what the
// library cannot see through a raw pointer (dimensions, element sizes, the
// lengths of the auxiliary arrays), builds the TensorViews without copying,
// and calls the library with the GIL released.  A library Status other than
// OK becomes ValueError (MemoryError for kOutOfMemory) carrying the
// library's one-line message.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "flash_attention/flash_attention.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace fa_py;

namespace fa_py {
thread_local double last_forward_seconds = 0.0;
}  // namespace fa_py

namespace {

std::int64_t length_of(const nb::handle& value, std::size_t axis) {
  In a;
  if (!nb::try_cast(value, a) || a.ndim() <= axis) return -1;
  return static_cast<std::int64_t>(a.shape(axis));
}

// Points `p` and `t` at the call's auxiliary arrays (a dict of name ->
// array; each must stay alive for the call, which the caller's dict sees to).
void attach(const nb::dict& arrays, fa::AttentionParams* p, fa::AttentionTensors* t) {
  for (auto [key, value] : arrays) {
    const std::string name = nb::cast<std::string>(key);
    if (value.is_none()) continue;
    if (name == "mask") {
      p->mask = aux<std::int8_t>(value, "mask", {p->seq_q, p->seq_kv});
    } else if (name == "cu_seqlens_q") {
      p->cu_seqlens_q = aux<std::int32_t>(value, "cu_seqlens_q", {p->batch + 1});
    } else if (name == "cu_seqlens_kv") {
      p->cu_seqlens_kv = aux<std::int32_t>(value, "cu_seqlens_kv", {p->batch + 1});
    } else if (name == "seqlens_kv") {
      p->seqlens_kv = aux<std::int32_t>(value, "seqlens_kv", {p->batch});
    } else if (name == "block_table") {
      p->block_table = aux<std::int32_t>(value, "block_table", {p->batch, -1});
      p->max_blocks_per_seq = length_of(value, 1);
    } else if (name == "sinks") {
      p->sinks = aux<float>(value, "sinks", {p->num_heads});
    } else if (name == "alibi_slopes") {
      p->alibi_slopes = aux<float>(value, "alibi_slopes", {p->num_heads});
    } else if (name == "bias") {
      p->bias = aux<float>(value, "bias", {-1, p->seq_q, p->seq_kv});
      p->bias_heads = length_of(value, 0);
    } else if (name == "descale_q" || name == "descale_k" || name == "descale_v") {
      const float* data = aux<float>(value, name.c_str(), {-1});
      const std::int64_t count = length_of(value, 0);
      if (name == "descale_q") p->descale_q = data, p->descale_q_count = count;
      if (name == "descale_k") p->descale_k = data, p->descale_k_count = count;
      if (name == "descale_v") p->descale_v = data, p->descale_v_count = count;
    } else if (name == "k_scale" || name == "v_scale") {
      In a;
      if (!nb::try_cast(value, a)) throw nb::type_error((name + ": expected an array on the CPU").c_str());
      if (a.dtype() != nb::dtype<float>()) throw nb::type_error((name + ": expected float32 elements").c_str());
      (name == "k_scale" ? t->k_scale : t->v_scale) = view_of(a, fa::DType::kF32, name.c_str());
    } else {
      throw nb::value_error(("unknown auxiliary array '" + name + "'").c_str());
    }
  }
}

fa::AttentionTensors input_views(const In& q, const In& k, const In& v, const std::string& q_dtype,
                                 const std::string& kv_dtype) {
  fa::AttentionTensors t;
  t.q = view_of(q, dtype_named(q_dtype, "q"), "q");
  const fa::DType kv = dtype_named(kv_dtype, "k");
  t.k = view_of(k, kv, "k");
  t.v = view_of(v, kv, "v");
  return t;
}

float* lse_pointer(const std::optional<Out>& lse, const fa::AttentionParams& p) {
  if (!lse) return nullptr;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const std::int64_t rows = (varlen ? 1 : p.batch) * p.num_heads * p.seq_q;
  if (lse->dtype() != nb::dtype<float>() || static_cast<std::int64_t>(lse->size()) != rows || !row_major(*lse)) {
    throw nb::value_error(("lse: expected a contiguous float32 array of " + std::to_string(rows) +
                           " elements ([batch, num_heads, seq_q])").c_str());
  }
  return static_cast<float*>(lse->data());
}

// A forward call's tensors: the views checked, the auxiliary arrays
// attached to `p`.
fa::AttentionTensors forward_tensors(fa::AttentionParams* p, const In& q, const In& k, const In& v, const Out& o,
                                     const std::optional<Out>& lse, const nb::dict& arrays,
                                     const std::string& q_dtype, const std::string& kv_dtype,
                                     const std::string& o_dtype) {
  fa::AttentionTensors t = input_views(q, k, v, q_dtype, kv_dtype);
  t.o = view_of(o, dtype_named(o_dtype, "out"), "out");
  attach(arrays, p, &t);
  t.lse = lse_pointer(lse, *p);
  return t;
}

void forward(int version, fa::AttentionParams p, const In& q, const In& k, const In& v, const Out& o,
             const std::optional<Out>& lse, const nb::dict& arrays, const std::string& q_dtype,
             const std::string& kv_dtype, const std::string& o_dtype) {
  const ForwardEntry entry = forward_entry(version);
  const fa::AttentionTensors t = forward_tensors(&p, q, k, v, o, lse, arrays, q_dtype, kv_dtype, o_dtype);
  run_forward(entry, p, t);
}

// The same call as forward(), `runs` times in a C++ loop, each timed with
// the steady clock (seconds): the library's own latency for this call, to
// set the Python layer's cost against (bench/compare_peers --python).
std::vector<double> time_forward(int version, fa::AttentionParams p, const In& q, const In& k, const In& v,
                                 const Out& o, const std::optional<Out>& lse, const nb::dict& arrays,
                                 const std::string& q_dtype, const std::string& kv_dtype, const std::string& o_dtype,
                                 int runs) {
  const ForwardEntry entry = forward_entry(version);
  const fa::AttentionTensors t = forward_tensors(&p, q, k, v, o, lse, arrays, q_dtype, kv_dtype, o_dtype);
  std::vector<double> seconds;
  seconds.reserve(static_cast<std::size_t>(runs > 0 ? runs : 0));
  fa::Status s;
  {
    nb::gil_scoped_release release;
    for (int i = 0; i < runs && s.ok(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      s = entry(p, t);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  raise_if_error(s);
  return seconds;
}

void backward(fa::AttentionParams p, const In& q, const In& k, const In& v, const In& o, const Out& lse,
              const In& dout, const Out& dq, const Out& dk, const Out& dv, const std::optional<Out>& dbias,
              const std::optional<Out>& dsinks, const nb::dict& arrays, const std::string& dtype,
              const std::string& grad_dtype) {
  fa::AttentionTensors t = input_views(q, k, v, dtype, dtype);
  const fa::DType in = dtype_named(dtype, "q");
  const fa::DType grad = dtype_named(grad_dtype, "dq");
  t.o = view_of(o, in, "out");
  attach(arrays, &p, &t);
  t.lse = lse_pointer(lse, p);
  fa::AttentionGrads g;
  g.dout = view_of(dout, in, "dout");
  g.dq = view_of(dq, grad, "dq");
  g.dk = view_of(dk, grad, "dk");
  g.dv = view_of(dv, grad, "dv");
  if (dbias) {
    const std::int64_t n = p.bias_heads * p.seq_q * p.seq_kv;
    if (dbias->dtype() != nb::dtype<float>() || static_cast<std::int64_t>(dbias->size()) != n || !row_major(*dbias)) {
      throw nb::value_error("dbias: expected a contiguous float32 array shaped like the bias");
    }
    g.dbias = static_cast<float*>(dbias->data());
  }
  if (dsinks) {
    if (dsinks->dtype() != nb::dtype<float>() || static_cast<std::int64_t>(dsinks->size()) != p.num_heads ||
        !row_major(*dsinks)) {
      throw nb::value_error("dsinks: expected a contiguous float32 array of num_heads elements");
    }
    g.dsinks = static_cast<float*>(dsinks->data());
  }
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::fa2_backward(p, t, g);
  }
  raise_if_error(s);
}

std::tuple<nb::ndarray<nb::numpy, double>, nb::ndarray<nb::numpy, double>> reference(
    fa::AttentionParams p, const In& q, const In& k, const In& v, const nb::dict& arrays, const std::string& q_dtype,
    const std::string& kv_dtype) {
  fa::AttentionTensors t = input_views(q, k, v, q_dtype, kv_dtype);
  attach(arrays, &p, &t);
  const std::size_t rows = static_cast<std::size_t>((p.cu_seqlens_q ? 1 : p.batch) * p.seq_q);
  const std::size_t heads = static_cast<std::size_t>(p.num_heads), dim = static_cast<std::size_t>(p.head_dim);
  auto out = zeros(rows * heads * dim), lse = zeros(rows * heads);
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::reference_forward(p, t, out.get(), lse.get());
  }
  raise_if_error(s);
  const std::size_t batch = p.cu_seqlens_q ? 1 : static_cast<std::size_t>(p.batch);
  const std::size_t seq = static_cast<std::size_t>(p.seq_q);
  return {numpy_f64(std::move(out), {batch, seq, heads, dim}), numpy_f64(std::move(lse), {batch, heads, seq})};
}

nb::tuple reference_grads(fa::AttentionParams p, const In& q, const In& k, const In& v, const In& dout,
                          const nb::dict& arrays, const std::string& dtype) {
  fa::AttentionTensors t = input_views(q, k, v, dtype, dtype);
  attach(arrays, &p, &t);
  const fa::TensorView dov = view_of(dout, dtype_named(dtype, "dout"), "dout");
  const bool varlen = p.cu_seqlens_q != nullptr;
  const std::size_t batch = varlen ? 1 : static_cast<std::size_t>(p.batch);
  const std::size_t sq = static_cast<std::size_t>(p.seq_q), skv = static_cast<std::size_t>(p.seq_kv);
  const std::size_t h = static_cast<std::size_t>(p.num_heads), hkv = static_cast<std::size_t>(p.kv_heads());
  const std::size_t d = static_cast<std::size_t>(p.head_dim);
  auto dq = zeros(batch * sq * h * d), dk = zeros(batch * skv * hkv * d), dv = zeros(batch * skv * hkv * d);
  auto dbias = zeros(static_cast<std::size_t>(p.bias_heads) * sq * skv), dsinks = zeros(h);
  fa::Status s;
  {
    nb::gil_scoped_release release;
    s = fa::reference_backward(p, t, dov, dq.get(), dk.get(), dv.get(), p.bias ? dbias.get() : nullptr,
                               p.sinks ? dsinks.get() : nullptr);
  }
  raise_if_error(s);
  nb::object db = nb::none(), ds = nb::none();
  const bool has_bias = p.bias != nullptr, has_sinks = p.sinks != nullptr;
  if (has_bias) db = nb::cast(numpy_f64(std::move(dbias), {static_cast<std::size_t>(p.bias_heads), sq, skv}));
  if (has_sinks) ds = nb::cast(numpy_f64(std::move(dsinks), {h}));
  return nb::make_tuple(numpy_f64(std::move(dq), {batch, sq, h, d}), numpy_f64(std::move(dk), {batch, skv, hkv, d}),
                        numpy_f64(std::move(dv), {batch, skv, hkv, d}), db, ds);
}

nb::dict plan(int version, fa::AttentionParams p, const std::string& dtype, const std::string& kv_dtype,
              const nb::dict& arrays) {
  forward_entry(version);  // the version's check
  fa::AttentionTensors unused;
  attach(arrays, &p, &unused);
  fa::TilePlan tp;
  const fa::Status s = fa::plan(static_cast<fa::Version>(version), p, dtype_named(dtype, "dtype"),
                                dtype_named(kv_dtype, "kv_dtype"), &tp);
  raise_if_error(s);
  nb::dict d;
  d["tile_q"] = tp.tile_q;
  d["tile_kv"] = tp.tile_kv;
  d["working_set_bytes"] = tp.working_set_bytes;
  d["limit_bytes"] = tp.limit_bytes;
  d["target"] = tp.target;
  d["source"] = tp.source;
  d["threads"] = tp.threads;
  d["work_items"] = tp.work_items;
  d["occupancy"] = tp.occupancy;
  d["num_splits"] = tp.num_splits;
  d["split_keys"] = tp.split_keys;
  d["pack_gqa"] = tp.pack_gqa;
  d["pack_tile"] = tp.pack_tile;
  d["q_step"] = tp.q_step;
  d["row_rows"] = tp.row_rows;
  return d;
}

std::vector<std::string> available_isas() {
  std::vector<std::string> names;
  for (fa::Isa isa : {fa::Isa::kGeneric, fa::Isa::kAvx2, fa::Isa::kAvx512, fa::Isa::kAvx512Bf16, fa::Isa::kAmx}) {
    if (fa::isa_available(isa)) names.emplace_back(fa::isa_name(isa));
  }
  return names;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "The library's C++ API (ops_transformer's low-level layer; use the functions of ops_transformer).";

  nb::enum_<fa::SparseMode>(m, "SparseMode")
      .value("MASK_AND_BAND", fa::SparseMode::kMaskAndBand)
      .value("ALL", fa::SparseMode::kAll)
      .value("CAUSAL_TOP_LEFT", fa::SparseMode::kCausalTopLeft)
      .value("CAUSAL_BOTTOM_RIGHT", fa::SparseMode::kCausalBottomRight)
      .value("BAND", fa::SparseMode::kBand);

  nb::enum_<fa::Isa>(m, "Isa")
      .value("GENERIC", fa::Isa::kGeneric)
      .value("AVX2", fa::Isa::kAvx2)
      .value("AVX512", fa::Isa::kAvx512)
      .value("AVX512BF16", fa::Isa::kAvx512Bf16)
      .value("AMX", fa::Isa::kAmx);

  // The scalar fields of fa::AttentionParams; the arrays it points to travel
  // beside it (the `arrays` dict of each call), so they live as long as it.
  nb::class_<fa::AttentionParams>(m, "AttentionParams")
      .def(nb::init<>())
      // The shape in one crossing (the per-call path sets little else).
      .def("__init__",
           [](fa::AttentionParams* p, std::int64_t batch, std::int64_t seq_q, std::int64_t seq_kv,
              std::int64_t num_heads, std::int64_t num_kv_heads, std::int64_t head_dim) {
             new (p) fa::AttentionParams();
             p->batch = batch;
             p->seq_q = seq_q;
             p->seq_kv = seq_kv;
             p->num_heads = num_heads;
             p->num_kv_heads = num_kv_heads;
             p->head_dim = head_dim;
           },
           "batch"_a, "seq_q"_a, "seq_kv"_a, "num_heads"_a, "num_kv_heads"_a, "head_dim"_a)
      .def_rw("batch", &fa::AttentionParams::batch)
      .def_rw("seq_q", &fa::AttentionParams::seq_q)
      .def_rw("seq_kv", &fa::AttentionParams::seq_kv)
      .def_rw("num_heads", &fa::AttentionParams::num_heads)
      .def_rw("num_kv_heads", &fa::AttentionParams::num_kv_heads)
      .def_rw("head_dim", &fa::AttentionParams::head_dim)
      .def_rw("scale", &fa::AttentionParams::scale, nb::arg("scale").none())
      .def_rw("causal", &fa::AttentionParams::causal)
      .def_rw("sparse_mode", &fa::AttentionParams::sparse_mode, nb::arg("sparse_mode").none())
      .def_rw("pre_tokens", &fa::AttentionParams::pre_tokens)
      .def_rw("next_tokens", &fa::AttentionParams::next_tokens)
      .def_rw("block_size", &fa::AttentionParams::block_size)
      .def_rw("kv_num_blocks", &fa::AttentionParams::kv_num_blocks)
      .def_rw("softcap", &fa::AttentionParams::softcap)
      .def_rw("keep_prob", &fa::AttentionParams::keep_prob)
      .def_rw("dropout_seed", &fa::AttentionParams::dropout_seed)
      .def_rw("threads", &fa::AttentionParams::threads)
      .def_rw("tile_q", &fa::AttentionParams::tile_q)
      .def_rw("tile_kv", &fa::AttentionParams::tile_kv)
      .def_rw("num_splits", &fa::AttentionParams::num_splits)
      .def_rw("kv_heads_side_by_side", &fa::AttentionParams::kv_heads_side_by_side)
      .def_rw("isa", &fa::AttentionParams::isa, nb::arg("isa").none())
      .def_rw("async_prefetch", &fa::AttentionParams::async_prefetch, nb::arg("async_prefetch").none());

  m.def("forward", &forward, "version"_a, "params"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "arrays"_a,
        "q_dtype"_a, "kv_dtype"_a, "out_dtype"_a,
        "Runs version's forward pass into `out` (and `lse`); views are [batch, heads, seq, head_dim].");
  m.def("time_forward", &time_forward, "version"_a, "params"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
        "arrays"_a, "q_dtype"_a, "kv_dtype"_a, "out_dtype"_a, "runs"_a,
        "forward()'s call `runs` times in a C++ loop: each call's seconds (the library's own latency).");
  m.def("last_forward_seconds", [] { return last_forward_seconds; },
        "Seconds the library spent in this thread's last forward call (timed in C++ around the entry point).");
  m.def("backward", &backward, "params"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a, "dv"_a,
        "dbias"_a.none(), "dsinks"_a.none(), "arrays"_a, "dtype"_a, "grad_dtype"_a,
        "FlashAttention-2's backward pass into dq, dk, dv (and dbias, dsinks).");
  m.def("reference_forward", &reference, "params"_a, "q"_a, "k"_a, "v"_a, "arrays"_a, "q_dtype"_a, "kv_dtype"_a,
        "The float64 reference: (out [batch, seq_q, heads, head_dim], lse [batch, heads, seq_q]).");
  m.def("reference_backward", &reference_grads, "params"_a, "q"_a, "k"_a, "v"_a, "dout"_a, "arrays"_a, "dtype"_a,
        "The float64 reference gradients: (dq, dk, dv in [batch, seq, heads, head_dim], dbias or None, dsinks or None).");
  m.def("plan", &plan, "version"_a, "params"_a, "dtype"_a, "kv_dtype"_a, "arrays"_a,
        "The tile plan the forward pass would use, as a dict.");
  m.def("available_isas", &available_isas, "Kernel paths this build and CPU can run, slowest first.");
  m.def("built_isas", &fa::built_isas, "Kernel paths compiled into this build.");
  m.def("cpu_features", &fa::cpu_isa_features, "The instruction-set features the library detected on this CPU.");
  m.def("default_thread_count", &fa::default_thread_count, "Threads a call with threads=0 uses.");
  bind_operators(m);
  bind_direct_call(m);
  m.def("select_isa", [](const fa::AttentionParams& p) {
    fa::Isa isa;
    raise_if_error(fa::select_isa(p, &isa));
    return std::string(fa::isa_name(isa));
  }, "params"_a, "The kernel path a forward call with these parameters would run.");
}
