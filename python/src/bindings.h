// What the extension's source files share: the array types, the library
// Status as a Python exception, dtype names, views of arrays, the checks of
// auxiliary arrays, and float64 results handed to NumPy.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "flash_attention/flash_attention.h"

namespace fa_py {

namespace nb = nanobind;

using In = nb::ndarray<nb::ro, nb::device::cpu>;
using Out = nb::ndarray<nb::device::cpu>;

// OK returns; kOutOfMemory raises MemoryError; anything else ValueError
// with the library's one-line message.
inline void raise_if_error(const fa::Status& s) {
  if (s.ok()) return;
  if (s.code() == fa::StatusCode::kOutOfMemory) throw std::bad_alloc();
  throw nb::value_error(s.message().c_str());
}

inline fa::DType dtype_named(const std::string& name, const char* what) {
  if (auto dtype = fa::parse_dtype(name)) return *dtype;
  throw nb::type_error((std::string(what) + ": unknown dtype '" + name +
                        "' (expected fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 or int8)").c_str());
}

// A 4-D view [batch, heads, seq, head_dim] of `a`, whose elements are
// `dtype` (the Python layer may pass a same-width integer view of a dtype
// its framework cannot export, such as NumPy's ml_dtypes.bfloat16).
template <typename Array>
fa::TensorView view_of(const Array& a, fa::DType dtype, const char* what) {
  if (a.ndim() != 4) {
    throw nb::value_error((std::string(what) + ": expected a 4-D view [batch, heads, seq, head_dim], got " +
                           std::to_string(a.ndim()) + " dimensions").c_str());
  }
  if (a.itemsize() != fa::dtype_size(dtype)) {
    throw nb::type_error((std::string(what) + ": elements of " + std::to_string(a.itemsize()) + " bytes, expected " +
                          std::string(fa::dtype_name(dtype)) + " (" + std::to_string(fa::dtype_size(dtype)) +
                          " bytes)").c_str());
  }
  fa::TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype;
  for (int i = 0; i < 4; ++i) {
    v.shape[i] = static_cast<std::int64_t>(a.shape(i));
    v.strides[i] = a.stride(i);
  }
  return v;
}

template <typename Array>
bool row_major(const Array& a) {
  std::int64_t expect = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= static_cast<std::int64_t>(a.shape(i));
  }
  return true;
}

template <typename T>
constexpr const char* element_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  return "int8";
}

// An auxiliary array of a call (mask, cu_seqlens, sinks, positions, ...):
// its element type, contiguity and shape (-1: any length) checked against
// what the library will read through the pointer returned.
template <typename T>
const T* aux(const In& a, const char* what, const std::vector<std::int64_t>& shape) {
  if (a.dtype() != nb::dtype<T>()) {
    throw nb::type_error((std::string(what) + ": expected " + element_name<T>() + " elements").c_str());
  }
  bool same = a.ndim() == shape.size();
  for (std::size_t i = 0; same && i < shape.size(); ++i) {
    same = shape[i] < 0 || static_cast<std::int64_t>(a.shape(i)) == shape[i];
  }
  if (!same) {
    std::string want = "[", got = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      want += (i ? ", " : "") + (shape[i] < 0 ? std::string("n") : std::to_string(shape[i]));
    }
    for (std::size_t i = 0; i < a.ndim(); ++i) got += (i ? ", " : "") + std::to_string(a.shape(i));
    throw nb::value_error((std::string(what) + ": shape " + got + "], expected " + want + "]").c_str());
  }
  if (!row_major(a)) throw nb::value_error((std::string(what) + ": expected a contiguous array").c_str());
  return static_cast<const T*>(a.data());
}

template <typename T>
const T* aux(const nb::handle& value, const char* what, const std::vector<std::int64_t>& shape) {
  In a;
  if (!nb::try_cast(value, a)) {
    throw nb::type_error((std::string(what) + ": expected an array on the CPU").c_str());
  }
  return aux<T>(a, what, shape);
}

// A float64 NumPy array owning `data`.
inline nb::ndarray<nb::numpy, double> numpy_f64(std::unique_ptr<double[]> data, std::vector<std::size_t> shape) {
  double* raw = data.release();
  nb::capsule owner(raw, [](void* ptr) noexcept { delete[] static_cast<double*>(ptr); });
  return nb::ndarray<nb::numpy, double>(raw, shape.size(), shape.data(), owner);
}

inline std::unique_ptr<double[]> zeros(std::size_t n) { return std::unique_ptr<double[]>(new double[n > 0 ? n : 1]()); }

// Seconds the library spent in this thread's last forward call, timed in
// C++ around the entry point alone: what a call from Python costs beyond it
// is the Python layer's (bench/compare_peers --python).
extern thread_local double last_forward_seconds;

using ForwardEntry = fa::Status (*)(const fa::AttentionParams&, const fa::AttentionTensors&);

// The version's entry point; ValueError for a version that does not exist.
inline ForwardEntry forward_entry(int version) {
  switch (version) {
    case 1: return &fa::fa1_forward;
    case 2: return &fa::fa2_forward;
    case 3: return &fa::fa3_forward;
  }
  throw nb::value_error(("version: " + std::to_string(version) + " (expected 1, 2 or 3)").c_str());
}

// One forward call with the GIL released, its own time kept in
// last_forward_seconds; a Status other than OK raises.
inline void run_forward(ForwardEntry entry, const fa::AttentionParams& p, const fa::AttentionTensors& t) {
  fa::Status s;
  {
    nb::gil_scoped_release release;
    const auto start = std::chrono::steady_clock::now();
    s = entry(p, t);
    last_forward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  raise_if_error(s);
}

// The other operators' functions (operators_module.cpp).
void bind_operators(nb::module_& m);

// The everyday attention call in one crossing (direct_call.cpp).
void bind_direct_call(nb::module_& m);

}  // namespace fa_py
