// The everyday forward call in one crossing: ops_transformer.attention on
// NumPy arrays or plain PyTorch CPU tensors, with only the everyday keywords
// (layout BSND/BNSD/BSH, version, causal, the masks that need no band,
// scale, num_heads, num_kv_heads, threads, out; the other features' keywords
// only at their "off" values, as flash_attn_func and SDPA pass them).
//
// Why it exists: between calls that stream megabytes through the caches,
// the general path (the Call class: a few hundred bytecodes, the views built
// in Python, the output allocated through the framework's Python API) runs
// with cold caches, and cost 58-116 us a call from NumPy and about 250 us
// from PyTorch at the guide's shape, against about 5 us warm.  Here a NumPy
// array is read and allocated through NumPy's C API, a tensor is read and
// its output handed over through DLPack (one C call each through PyTorch's
// DLPack exchange table, or one Python call each without argument parsing
// where PyTorch has no table), and the library runs with the GIL released.
//
// It never decides anything the general path would decide differently:
// whatever it does not recognise (another keyword, a subclass, a dtype
// other than fp32/fp16/bf16, a strided head_dim, a negative stride, a
// tensor that needs a gradient) makes it answer None, and the caller takes
// the general path, which gives the same results and raises the errors.
// The library's own errors are the same Status either way and raise here.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#define NPY_NO_DEPRECATED_API NPY_1_23_API_VERSION
#include <numpy/arrayobject.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "bindings.h"
#include "flash_attention/flash_attention.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace fa_py {
namespace {

// What the Python layer registers (set_numpy_fast_path, set_torch_fast_path).
// Held for the life of the process: never released, as the interpreter may
// be finalised before static destructors run.
struct NumpyPath {
  std::vector<std::pair<PyArray_Descr*, fa::DType>> dtypes;  // the descriptor objects, by identity
};
// DLPack's managed tensor (the unversioned one, which to_dlpack's capsule
// holds), the ABI every framework shares.
struct ManagedTensor {
  nb::dlpack::dltensor tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor*);
};

// DLPack's C exchange table (DLPack 1.3: the type attribute
// __dlpack_c_exchange_api__, a capsule named "dlpack_exchange_api", which
// recent PyTorch publishes; 2.15 does).  Its entries reach the framework's tensors as C calls:
// no Python frame, no argument parsing, no capsule, no allocation to read a
// tensor.  Declared here from the DLPack header's ABI, which is stable
// within a major version.
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct ManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned*);
  std::uint64_t flags;
  nb::dlpack::dltensor tensor;
};
struct ExchangeApi {
  DLPackVersion version;
  const ExchangeApi* prev_api;
  // A new tensor of the framework's own (dtype, ndim, shape and device of
  // `prototype`); on failure set_error is called and the result is nonzero.
  int (*managed_tensor_allocator)(nb::dlpack::dltensor* prototype, ManagedTensorVersioned** out,
                                  void* error_context,
                                  void (*set_error)(void* error_context, const char* kind, const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensorVersioned** out);
  // Wraps an owned tensor as the framework's Python object (takes ownership).
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned* tensor, void** py_object);
  // A borrowed view of the object's tensor, valid until control returns to
  // Python (may be null: not every framework offers it).
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);
  int (*current_work_stream)(std::int32_t device_type, std::int32_t device_id, void** stream);
};

struct TorchPath {
  PyTypeObject* tensor_type = nullptr;  // torch.Tensor, exact (subclasses take the general path)
  // The exchange table where this PyTorch has one (with the two entries
  // this file calls); otherwise the Python-level converters below.
  const ExchangeApi* exchange = nullptr;
  PyObject* to_dlpack = nullptr;        // torch.utils.dlpack.to_dlpack
  PyObject* from_dlpack = nullptr;      // its DLPack import (torch._C._from_dlpack)
  // torch.Tensor's descriptors of the attribute requires_grad and the
  // method is_neg, looked up once: called directly they skip the lookup
  // through the tensor type's MRO, which between long calls reads cold
  // dictionaries (1.4 and 2.1 us a tensor at the guide's shape).
  PyObject* requires_grad = nullptr;
  PyObject* is_neg = nullptr;
};
NumpyPath* numpy_path = nullptr;
TorchPath* torch_path = nullptr;

// One array as its framework stores it: up to 4 dimensions, strides in
// elements.
struct Raw {
  void* data = nullptr;
  fa::DType dtype = fa::DType::kF32;
  int ndim = 0;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t strides[4] = {0, 0, 0, 0};
};

bool read_numpy(PyObject* obj, Raw* r) {
  auto* a = reinterpret_cast<PyArrayObject*>(obj);
  PyArray_Descr* descr = PyArray_DESCR(a);
  bool known = false;
  for (const auto& [object, dtype] : numpy_path->dtypes) {
    if (object == descr) {
      r->dtype = dtype;
      known = true;
    }
  }
  const int ndim = PyArray_NDIM(a);
  if (!known || ndim < 1 || ndim > 4) return false;
  const auto itemsize = static_cast<npy_intp>(fa::dtype_size(r->dtype));
  r->data = PyArray_DATA(a);
  r->ndim = ndim;
  for (int i = 0; i < ndim; ++i) {
    const npy_intp stride = PyArray_STRIDES(a)[i];
    if (stride < 0 || stride % itemsize) return false;
    r->shape[i] = PyArray_DIMS(a)[i];
    r->strides[i] = stride / itemsize;
  }
  return true;
}

// A CPU tensor of fp32, fp16 or bf16 with 1-4 dimensions and no negative
// stride, as Raw; false for anything else.
bool from_dltensor(const nb::dlpack::dltensor& t, Raw* r) {
  if (t.device.device_type != 1 /* kDLCPU */ || t.ndim < 1 || t.ndim > 4 || t.dtype.lanes != 1) return false;
  if (t.dtype.code == 2 /* kDLFloat */ && t.dtype.bits == 32) r->dtype = fa::DType::kF32;
  else if (t.dtype.code == 2 && t.dtype.bits == 16) r->dtype = fa::DType::kF16;
  else if (t.dtype.code == 4 /* kDLBfloat */ && t.dtype.bits == 16) r->dtype = fa::DType::kBF16;
  else return false;
  r->data = static_cast<char*>(t.data) + t.byte_offset;
  r->ndim = t.ndim;
  std::int64_t dense = 1;
  for (int i = t.ndim; i-- > 0;) {
    r->shape[i] = t.shape[i];
    r->strides[i] = t.strides ? t.strides[i] : dense;
    dense *= t.shape[i];
    if (r->strides[i] < 0) return false;
  }
  return true;
}

bool read_torch(PyObject* obj, Raw* r) {
  PyObject* grad = Py_TYPE(torch_path->requires_grad)->tp_descr_get(torch_path->requires_grad, obj,
                                                                     reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  if (!grad) {
    PyErr_Clear();
    return false;
  }
  const bool needs_grad = grad == Py_True;
  Py_DECREF(grad);
  if (needs_grad) return false;  // the autograd operator's call
  // A negated view (torch._neg_view) exports its memory un-negated through
  // DLPack: the general path resolves it.
  PyObject* negated = PyObject_CallOneArg(torch_path->is_neg, obj);
  if (!negated) {
    PyErr_Clear();
    return false;
  }
  const bool is_negated = negated != Py_False;
  Py_DECREF(negated);
  if (is_negated) return false;
  // Shape, strides, dtype, device and data in one call, with the exporter's
  // own checks (dense tensors only): a borrowed view through the exchange
  // table, or a capsule from to_dlpack.
  if (const ExchangeApi* api = torch_path->exchange) {
    nb::dlpack::dltensor t;
    if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) {
      PyErr_Clear();
      return false;
    }
    return from_dltensor(t, r);
  }
  PyObject* capsule = PyObject_CallOneArg(torch_path->to_dlpack, obj);
  if (!capsule) {
    PyErr_Clear();
    return false;
  }
  auto* mt = static_cast<ManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (!mt) PyErr_Clear();
  const bool ok = mt && from_dltensor(mt->tensor, r);
  // Not consumed: the capsule's destructor gives the tensor's reference
  // back; the caller holds the tensor for the whole call.
  Py_DECREF(capsule);
  return ok;
}

// A dense C-order array of `dtype`, uninitialised: a NumPy array, or a
// tensor handed to PyTorch through DLPack (it frees the memory with the
// tensor).  *data receives its first element's address.
nb::object allocate_numpy(const std::int64_t* shape, int ndim, fa::DType dtype, void** data) {
  PyArray_Descr* descr = nullptr;
  for (const auto& [object, d] : numpy_path->dtypes) {
    if (d == dtype) descr = object;
  }
  npy_intp dims[4];
  for (int i = 0; i < ndim; ++i) dims[i] = static_cast<npy_intp>(shape[i]);
  Py_INCREF(descr);  // PyArray_NewFromDescr steals it
  PyObject* a = PyArray_NewFromDescr(&PyArray_Type, descr, ndim, dims, nullptr, nullptr, 0, nullptr);
  if (!a) throw nb::python_error();
  *data = PyArray_DATA(reinterpret_cast<PyArrayObject*>(a));
  return nb::steal(a);
}

nb::dlpack::dtype dl_dtype(fa::DType dtype) {
  return dtype == fa::DType::kF32   ? nb::dlpack::dtype{2, 32, 1}
         : dtype == fa::DType::kF16 ? nb::dlpack::dtype{2, 16, 1}
                                    : nb::dlpack::dtype{4, 16, 1};
}

// A dense C-order tensor in memory of our own (64-byte lines, as PyTorch's
// CPU allocator aligns), with its shape, as either DLPack managed tensor:
// the versioned one for the exchange table, the unversioned one for a
// capsule.  Its deleter frees both.
template <class Managed>
struct OwnedTensor {
  Managed managed;
  std::int64_t shape[4];
};

template <class Managed>
void free_owned(Managed* mt) {
  std::free(mt->tensor.data);
  delete reinterpret_cast<OwnedTensor<Managed>*>(mt);
}

template <class Managed>
OwnedTensor<Managed>* new_owned(const std::int64_t* shape, int ndim, fa::DType dtype) {
  std::size_t bytes = fa::dtype_size(dtype);
  for (int i = 0; i < ndim; ++i) bytes *= static_cast<std::size_t>(shape[i]);
  // (aligned_alloc wants a multiple of the alignment, and an empty output
  // still gets a line.)
  void* memory = std::aligned_alloc(64, std::max<std::size_t>(64, (bytes + 63) / 64 * 64));
  if (!memory) throw std::bad_alloc();
  auto* owned = new (std::nothrow) OwnedTensor<Managed>{};
  if (!owned) {
    std::free(memory);
    throw std::bad_alloc();
  }
  std::copy(shape, shape + ndim, owned->shape);
  nb::dlpack::dltensor& t = owned->managed.tensor;
  t.data = memory;
  t.device = {1 /* kDLCPU */, 0};
  t.ndim = ndim;
  t.dtype = dl_dtype(dtype);
  t.shape = owned->shape;
  t.strides = nullptr;  // dense, C order
  owned->managed.deleter = &free_owned<Managed>;
  return owned;
}

// An uninitialised tensor handed to PyTorch, which frees it with the
// tensor: through the exchange table, one C call; otherwise a capsule and
// a Python call to its DLPack import.
nb::object allocate_torch(const std::int64_t* shape, int ndim, fa::DType dtype, void** data) {
  if (const ExchangeApi* api = torch_path->exchange) {
    auto* owned = new_owned<ManagedTensorVersioned>(shape, ndim, dtype);
    owned->managed.version = {1, 0};
    *data = owned->managed.tensor.data;
    void* tensor = nullptr;
    // The call takes ownership (DLPack: the tensor is stolen), success or not.
    if (api->managed_tensor_to_py_object_no_sync(&owned->managed, &tensor) != 0 || !tensor) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "PyTorch could not take the output tensor");
      throw nb::python_error();
    }
    return nb::steal(static_cast<PyObject*>(tensor));
  }
  auto* owned = new_owned<ManagedTensor>(shape, ndim, dtype);
  // A capsule nobody consumed frees the tensor itself.
  PyObject* capsule = PyCapsule_New(&owned->managed, "dltensor", [](PyObject* c) {
    // Renamed once consumed (the importer then owns the tensor); checked
    // without PyCapsule_GetPointer, which would set an exception here.
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* mt = static_cast<ManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      mt->deleter(mt);
    }
  });
  if (!capsule) {
    free_owned(&owned->managed);
    throw nb::python_error();
  }
  PyObject* tensor = PyObject_CallOneArg(torch_path->from_dlpack, capsule);
  Py_DECREF(capsule);
  if (!tensor) throw nb::python_error();
  *data = owned->managed.tensor.data;
  return nb::steal(tensor);
}

enum class LayoutCode { kBsnd, kBnsd, kBsh };

// `r` as a view [batch, heads, seq, head_dim] (strides only), as the
// general path's logical_view builds it; false where that would raise.
bool logical(const Raw& r, LayoutCode layout, std::int64_t heads, fa::TensorView* v) {
  v->data = r.data;
  v->dtype = r.dtype;
  auto set = [&](int axis, std::int64_t extent, std::int64_t stride) {
    v->shape[axis] = extent;
    v->strides[axis] = stride;
  };
  if (layout == LayoutCode::kBsh) {
    if (r.ndim != 3 || heads <= 0 || r.shape[2] % heads) return false;
    set(0, r.shape[0], r.strides[0]);
    set(1, heads, r.shape[2] / heads * r.strides[2]);
    set(2, r.shape[1], r.strides[1]);
    set(3, r.shape[2] / heads, r.strides[2]);
  } else {
    if (r.ndim != 4) return false;
    const int h = layout == LayoutCode::kBnsd ? 1 : 2, s = 3 - h;
    set(0, r.shape[0], r.strides[0]);
    set(1, r.shape[h], r.strides[h]);
    set(2, r.shape[s], r.strides[s]);
    set(3, r.shape[3], r.strides[3]);
  }
  // A strided head_dim is refused (or copied, when asked) by the general path.
  return v->shape[3] <= 1 || v->strides[3] == 1;
}

struct Options {
  LayoutCode layout = LayoutCode::kBsnd;
  int version = 2;
  bool causal = false;
  std::optional<fa::SparseMode> sparse_mode;
  std::optional<float> scale;
  std::int64_t num_heads = 0, num_kv_heads = 0;  // 0: not given
  int threads = 0;
};

// A keyword at its "off" value (None, 0 or 0.0): what flash_attn_func and
// scaled_dot_product_attention pass when a feature is not used.
bool is_off(PyObject* value) {
  if (value == Py_None) return true;
  if (PyFloat_CheckExact(value)) return PyFloat_AS_DOUBLE(value) == 0.0;
  if (PyLong_CheckExact(value)) {
    int overflow = 0;
    return PyLong_AsLongLongAndOverflow(value, &overflow) == 0 && !overflow;
  }
  return false;
}

// A str's text, or nullptr (with no exception left set) for anything else.
const char* text_of(PyObject* value) {
  const char* text = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : nullptr;
  if (!text) PyErr_Clear();
  return text;
}

bool exact_int(PyObject* value, std::int64_t* out) {
  if (!PyLong_CheckExact(value)) return false;
  const long long x = PyLong_AsLongLong(value);
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = x;
  return true;
}

// The everyday keywords, and the features' keywords when they are off;
// false for any other key, or a value the general path would have to judge
// (a wrong type, an unknown layout, TND, ...).
bool read_options(PyObject* options, Options* o) {
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(options, &pos, &key, &value)) {
    const char* name = text_of(key);
    if (!name) return false;
    std::int64_t number = 0;
    if (std::strcmp(name, "layout") == 0) {
      const char* text = text_of(value);
      if (!text) return false;
      if (std::strcmp(text, "BSND") == 0) o->layout = LayoutCode::kBsnd;
      else if (std::strcmp(text, "BNSD") == 0) o->layout = LayoutCode::kBnsd;
      else if (std::strcmp(text, "BSH") == 0) o->layout = LayoutCode::kBsh;
      else return false;
    } else if (std::strcmp(name, "version") == 0) {
      if (!exact_int(value, &number) || number < 1 || number > 3) return false;
      o->version = static_cast<int>(number);
    } else if (std::strcmp(name, "causal") == 0) {
      if (!PyBool_Check(value)) return false;
      o->causal = value == Py_True;
    } else if (std::strcmp(name, "scale") == 0) {
      if (value == Py_None) continue;
      if (!PyFloat_CheckExact(value)) return false;
      o->scale = static_cast<float>(PyFloat_AS_DOUBLE(value));
    } else if (std::strcmp(name, "num_heads") == 0 || std::strcmp(name, "num_kv_heads") == 0) {
      if (value == Py_None) continue;
      if (!exact_int(value, &number) || number <= 0) return false;
      (name[4] == 'h' ? o->num_heads : o->num_kv_heads) = number;
    } else if (std::strcmp(name, "threads") == 0) {
      if (!exact_int(value, &number) || number < 0 || number > (1 << 16)) return false;
      o->threads = static_cast<int>(number);
    } else if (std::strcmp(name, "sparse_mode") == 0) {
      // The modes that need no band or mask (SDPA's is_causal is top-left).
      if (value == Py_None) continue;
      const char* text = text_of(value);
      if (!text) return false;
      if (std::strcmp(text, "causal_top_left") == 0) o->sparse_mode = fa::SparseMode::kCausalTopLeft;
      else if (std::strcmp(text, "causal_bottom_right") == 0) o->sparse_mode = fa::SparseMode::kCausalBottomRight;
      else if (std::strcmp(text, "all") == 0) o->sparse_mode = fa::SparseMode::kAll;
      else return false;
    } else if (std::strcmp(name, "dropout_seed") == 0) {
      if (!exact_int(value, &number)) return false;  // read only with dropout, which this call never has
    } else if (std::strcmp(name, "copy") == 0) {
      if (!PyBool_Check(value)) return false;  // copies only a strided head_dim, which this call declines
    } else if (std::strcmp(name, "window") == 0 || std::strcmp(name, "softcap") == 0 ||
               std::strcmp(name, "dropout_p") == 0 || std::strcmp(name, "alibi_slopes") == 0 ||
               std::strcmp(name, "mask") == 0 || std::strcmp(name, "bias") == 0 ||
               std::strcmp(name, "sinks") == 0) {
      if (!is_off(value)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool computes_in(fa::DType d) { return d == fa::DType::kF32 || d == fa::DType::kF16 || d == fa::DType::kBF16; }

nb::object attention_direct(nb::handle q, nb::handle k, nb::handle v, nb::handle return_lse_flag, nb::handle out,
                            const nb::dict& options) {
  if (!PyBool_Check(return_lse_flag.ptr())) return nb::none();  // the general path names a wrong type
  const bool return_lse = return_lse_flag.ptr() == Py_True;
  PyTypeObject* type = Py_TYPE(q.ptr());
  const bool numpy = numpy_path && type == &PyArray_Type;
  const bool torch = !numpy && torch_path && type == torch_path->tensor_type;
  if ((!numpy && !torch) || Py_TYPE(k.ptr()) != type || Py_TYPE(v.ptr()) != type) return nb::none();

  Options o;
  if (!read_options(options.ptr(), &o)) return nb::none();
  if (o.layout == LayoutCode::kBsh && o.num_heads == 0) return nb::none();

  Raw rq, rk, rv;
  auto read = numpy ? &read_numpy : &read_torch;
  if (!read(q.ptr(), &rq) || !read(k.ptr(), &rk) || !read(v.ptr(), &rv)) return nb::none();
  if (rk.dtype != rv.dtype || !computes_in(rq.dtype) || !computes_in(rk.dtype)) return nb::none();

  fa::AttentionTensors t;
  const std::int64_t kv_heads = o.num_kv_heads ? o.num_kv_heads : o.num_heads;
  if (!logical(rq, o.layout, o.num_heads, &t.q) || !logical(rk, o.layout, kv_heads, &t.k) ||
      !logical(rv, o.layout, kv_heads, &t.v)) {
    return nb::none();
  }

  // The parameters the general path would set (Call.__init__).
  fa::AttentionParams p;
  p.batch = t.q.shape[0];
  p.num_heads = t.q.shape[1];
  p.seq_q = t.q.shape[2];
  p.head_dim = t.q.shape[3];
  p.num_kv_heads = t.k.shape[1];
  p.seq_kv = t.k.shape[2];
  p.causal = o.causal;
  p.sparse_mode = o.sparse_mode;
  p.scale = o.scale;
  p.threads = o.threads;
  if (o.layout == LayoutCode::kBnsd) p.kv_heads_side_by_side = false;

  // The output: the caller's `out` (q's type, shape and dtype, its head_dim
  // contiguous), or a new dense array.
  auto allocate = numpy ? &allocate_numpy : &allocate_torch;
  Raw ro = rq;
  nb::object result;
  if (!out.is_none()) {
    // (A read-only NumPy array is the general path's to refuse.)
    const bool writable = !numpy || PyArray_ISWRITEABLE(reinterpret_cast<PyArrayObject*>(out.ptr()));
    if (Py_TYPE(out.ptr()) != type || !writable || !read(out.ptr(), &ro) || ro.dtype != rq.dtype || ro.ndim != rq.ndim ||
        !std::equal(ro.shape, ro.shape + ro.ndim, rq.shape) || !logical(ro, o.layout, o.num_heads, &t.o)) {
      return nb::none();
    }
    result = nb::borrow(out);
  } else {
    result = allocate(rq.shape, rq.ndim, rq.dtype, &ro.data);
    for (std::int64_t i = ro.ndim, dense = 1; i-- > 0; dense *= ro.shape[i]) ro.strides[i] = dense;
    logical(ro, o.layout, o.num_heads, &t.o);
  }
  nb::object lse;
  if (return_lse) {
    const std::int64_t shape[3] = {p.batch, p.num_heads, p.seq_q};
    void* data = nullptr;
    lse = allocate(shape, 3, fa::DType::kF32, &data);
    t.lse = static_cast<float*>(data);
  }

  run_forward(forward_entry(o.version), p, t);
  if (return_lse) return nb::make_tuple(result, lse);
  return result;
}

// The type's DLPack exchange table, or nullptr where it has none this file
// can use (another major version, or an entry missing).
const ExchangeApi* exchange_api(nb::handle type) {
  PyObject* capsule = PyObject_GetAttrString(type.ptr(), "__dlpack_c_exchange_api__");
  if (!capsule) {
    PyErr_Clear();
    return nullptr;
  }
  const auto* api = PyCapsule_IsValid(capsule, "dlpack_exchange_api")
                        ? static_cast<const ExchangeApi*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"))
                        : nullptr;
  // The table lives as long as the process (DLPack's rule for it), so the
  // capsule need not be kept.
  Py_DECREF(capsule);
  if (!api || api->version.major != 1 || !api->managed_tensor_to_py_object_no_sync ||
      !api->dltensor_from_py_object_no_sync) {
    return nullptr;
  }
  return api;
}

}  // namespace

void bind_direct_call(nb::module_& m) {
  if (_import_array() < 0) throw nb::python_error();  // NumPy's C API table
  m.def("set_numpy_fast_path",
        [](nb::dict dtypes) {
          auto* path = new NumpyPath;
          for (auto [key, value] : dtypes) {
            PyArray_Descr* descr = nullptr;
            if (!PyArray_DescrCheck(key.ptr())) throw nb::type_error("set_numpy_fast_path: keys are NumPy dtypes");
            descr = reinterpret_cast<PyArray_Descr*>(key.inc_ref().ptr());
            const auto dtype = fa::parse_dtype(nb::cast<std::string>(value));
            if (!dtype || !computes_in(*dtype)) throw nb::value_error("set_numpy_fast_path: fp32, fp16 or bf16");
            path->dtypes.emplace_back(descr, *dtype);
          }
          numpy_path = path;
        },
        "dtypes"_a, "Enables attention_direct on NumPy arrays of these dtypes (dtype -> 'fp32', 'fp16' or 'bf16').");
  m.def("set_torch_fast_path",
        [](nb::handle tensor_type, nb::handle to_dlpack, nb::handle from_dlpack, bool use_exchange) {
          if (!PyType_Check(tensor_type.ptr())) throw nb::type_error("set_torch_fast_path: torch.Tensor expected");
          auto* path = new TorchPath;
          path->tensor_type = reinterpret_cast<PyTypeObject*>(tensor_type.inc_ref().ptr());
          path->to_dlpack = to_dlpack.inc_ref().ptr();
          path->from_dlpack = from_dlpack.inc_ref().ptr();
          path->requires_grad = PyObject_GetAttrString(tensor_type.ptr(), "requires_grad");
          path->is_neg = PyObject_GetAttrString(tensor_type.ptr(), "is_neg");
          if (!path->requires_grad || !path->is_neg || !Py_TYPE(path->requires_grad)->tp_descr_get) {
            Py_XDECREF(path->requires_grad);
            Py_XDECREF(path->is_neg);
            delete path;
            if (PyErr_Occurred()) throw nb::python_error();
            throw nb::type_error("set_torch_fast_path: torch.Tensor.requires_grad is not a descriptor");
          }
          if (use_exchange) path->exchange = exchange_api(tensor_type);
          torch_path = path;
        },
        "tensor_type"_a, "to_dlpack"_a, "from_dlpack"_a, "use_exchange"_a = true,
        "Enables attention_direct on plain CPU tensors (torch.Tensor and its DLPack converters; with "
        "use_exchange, its DLPack C exchange table where the type has one).");
  m.def("torch_fast_path_exchange", [] { return torch_path && torch_path->exchange; },
        "Whether attention_direct reaches PyTorch through its DLPack C exchange table.");
  m.def("attention_direct", &attention_direct, "q"_a, "k"_a, "v"_a, "return_lse"_a, "out"_a.none(), "options"_a,
        "ops_transformer.attention's everyday call in one crossing, or None where the general path must take it.");
}

}  // namespace fa_py
