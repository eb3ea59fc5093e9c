// Measurements of the path's own units, for the benchmark's Utilization
// line and the tests: the vector FMA peak on one thread, and the softmax's
// exp2 and the K/V widening over an array.
#pragma once

#include <ctime>

#include "kv_tiles.h"
#include "row_path.h"

namespace fa::FA_KERNEL_NS {

// Runs `body` (`inner` times per clock check) for about `seconds`; returns
// the calls per second.  The loop of the peak probes (FMA here, AMX in
// amx_tile_path.h).
template <class Body>
inline double calls_per_second(double seconds, long inner, Body&& body) {
  long calls = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double elapsed = 0.0;
  do {
    for (long k = 0; k < inner; ++k) body();
    calls += inner;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    elapsed = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
  } while (elapsed < seconds);
  return double(calls) / elapsed;
}

inline void exp2_array(const float* in, float* out, int n) {
  int i = 0;
  for (; i + Vec::W <= n; i += Vec::W) Vec::store(out + i, Vec::exp2(Vec::load(in + i)));
  if (i < n) {
    float buf[Vec::W] = {};
    for (int k = 0; k < n - i; ++k) buf[k] = in[i + k];
    Vec::store(buf, Vec::exp2(Vec::load(buf)));
    for (int k = 0; k < n - i; ++k) out[i + k] = buf[k];
  }
}

// The row path's widening in registers (load_elems, load_elem), taken back
// to the values (FP8 comes in its units, kFp8RowUnit); e4m3 a vector at a
// time as the row path does a tile at a time: exactly (load_tile) where
// e4m3_rows_have_nan finds the NaN code, else the fast way.
template <DType DT>
inline void widen_row_array(const void* in, float* out, int n) {
  const auto* p = static_cast<const Elem<DT>*>(in);
  int i = 0;
#if defined(FA_HAVE_SIMD_CONVERT)
  constexpr float kBack = is_fp8(DT) ? 1.0f / kFp8RowUnit<DT> : 1.0f;
  for (; i + Vec::W <= n; i += Vec::W) {
    if constexpr (DT == DType::kFP8E4M3) {
      if (e4m3_rows_have_nan(p + i, 0, 1, Vec::W)) {
        load_tile<DT>(p + i, 0, 1, Vec::W, out + i);
        continue;
      }
    }
    Vec::store(out + i, Vec::mul(load_elems<DT>(p + i), Vec::set1(kBack)));
  }
  for (; i < n; ++i) out[i] = load_elem<DT>(p, i) * kBack;
#else
  for (; i < n; ++i) out[i] = load_elem<DT>(p, i);
#endif
}

// A K/V row's widening for any dtype: as the tile loops widen it into their
// buffers (load_tile; int8 at scale 1), or with `row_path` as the row path
// does in registers.
inline void widen_array(DType dtype, bool row_path, const void* in, float* out, int n) {
  if (row_path) {
    switch (dtype) {
      case DType::kF32: return widen_row_array<DType::kF32>(in, out, n);
      case DType::kF16: return widen_row_array<DType::kF16>(in, out, n);
      case DType::kBF16: return widen_row_array<DType::kBF16>(in, out, n);
      case DType::kFP8E4M3: return widen_row_array<DType::kFP8E4M3>(in, out, n);
      case DType::kFP8E5M2: return widen_row_array<DType::kFP8E5M2>(in, out, n);
      case DType::kI8: return widen_row_array<DType::kI8>(in, out, n);
    }
  }
  switch (dtype) {
    case DType::kF32: load_tile<DType::kF32>(in, 0, 1, n, out); break;
    case DType::kF16: load_tile<DType::kF16>(in, 0, 1, n, out); break;
    case DType::kBF16: load_tile<DType::kBF16>(in, 0, 1, n, out); break;
    case DType::kFP8E4M3: load_tile<DType::kFP8E4M3>(in, 0, 1, n, out); break;
    case DType::kFP8E5M2: load_tile<DType::kFP8E5M2>(in, 0, 1, n, out); break;
    case DType::kI8: {  // a quantized cache's row, at scale 1
      const float one = 1.0f;
      load_quantized_tile(DType::kI8, in, 0, &one, 0, 1, n, out);
      break;
    }
  }
}

// The row path's FP8 widening through byte tables (Fp8Pairs::load_k for K,
// widen_fp8_key_pair for V), put back in order; and an int8 cache's codes
// as the tile unit's rows widen them (Int8Bf16Table, in order already; not
// as V's pairs); see KernelTable.
inline bool widen_pairs_array([[maybe_unused]] DType dtype, [[maybe_unused]] bool value_pairs,
                              [[maybe_unused]] const void* in, [[maybe_unused]] float* out, [[maybe_unused]] int n) {
#if defined(__AVX512VBMI__)
  if (dtype == DType::kI8) {
    if (value_pairs || n % 128 != 0) return false;
    const Int8Bf16Table table = Int8Bf16Table::make();
    for (int i = 0; i < n; i += 64) {
      __m512i first, second;
      table.widen_in_order(_mm512_loadu_si512(static_cast<const std::uint8_t*>(in) + i), first, second);
      alignas(64) std::uint16_t words[64];
      _mm512_store_si512(words, first);
      _mm512_store_si512(words + 32, second);
      for (int j = 0; j < 64; ++j) out[i + j] = detail::bf16_to_f32(words[j]);
    }
    return true;
  }
#endif
#if defined(FA_HAVE_ROW_FP8)
  if (!is_fp8(dtype) || n % 128 != 0) return false;
  const Fp8Bf16Table table =
      dtype == DType::kFP8E4M3 ? Fp8Bf16Table::of<DType::kFP8E4M3>() : Fp8Bf16Table::of<DType::kFP8E5M2>();
  const auto* codes = static_cast<const std::uint8_t*>(in);
  auto value = [](__m512bh v, int word) {
    alignas(64) std::uint16_t w[32];
    _mm512_store_si512(w, reinterpret_cast<__m512i>(v));
    return detail::bf16_to_f32(w[word]);
  };
  for (int i = 0; i < n; i += 128) {
    if (value_pairs) {
      __m512bh vv[4];
      widen_fp8_key_pair(_mm512_loadu_si512(codes + i), _mm512_loadu_si512(codes + i + 64), table, vv);
      for (int d = 0; d < 64; ++d) {  // vector k, lane L, pair j: dim 16L + 4k + j
        const int k = d % 16 / 4, pair = d / 16 * 4 + d % 4;
        out[i + d] = value(vv[k], 2 * pair);
        out[i + 64 + d] = value(vv[k], 2 * pair + 1);
      }
    } else {
      const Fp8Pairs<false> pairs{table, 0};
      for (int h = 0; h < 128; h += 64) {
        const auto k = pairs.load_k(codes + i + h, 64);
        for (int d = 0; d < 64; ++d) {
          const int at = fp8_k_position(d);
          out[i + h + d] = value(at < 32 ? k.first : k.second, at % 32);
        }
      }
    }
  }
  return true;
#else
  return false;
#endif
}

// Independent FMA chains (more than the FMA latency x pipes) on registers:
// the vector unit's peak on this thread.
// noinline: compiled on its own, so the chains stay in registers whatever the caller.
[[gnu::noinline]] inline double fma_peak_one_thread(double seconds) {
  using T = typename Vec::T;
  constexpr int kChains = 12;  // > FMA latency x pipes, and fits 16 registers with the two constants
  T acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Vec::set1(1.0f + i * 1e-3f);
  const T mul = Vec::set1(0.999999f), add = Vec::set1(1e-7f);
  const double rate = calls_per_second(seconds, 4096, [&] {
    for (int i = 0; i < kChains; ++i) acc[i] = Vec::fmadd(acc[i], mul, add);
  });
  float sink[Vec::W];
  T total = acc[0];
  for (int i = 1; i < kChains; ++i) total = Vec::add(total, acc[i]);
  Vec::store(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return 2.0 * Vec::W * kChains * rate / 1e9;
}

// Reads `bytes` (a multiple of 64, 64-byte aligned) at `data` again and again
// for about `seconds` with this path's widest loads, as the kernels stream
// K and V: the bytes per second this thread reads.  Eight independent sums,
// so the loads, not the adds' latency, set the pace.
[[gnu::noinline]] inline double read_rate_one_thread(const void* data, std::size_t bytes, double seconds) {
  using T = typename Vec::T;
  constexpr int kSums = 8;
  const float* p = static_cast<const float*>(data);
  const std::size_t n = bytes / sizeof(float) / (kSums * Vec::W) * (kSums * Vec::W);
  if (n == 0) return 0.0;
  T acc[kSums];
  for (int k = 0; k < kSums; ++k) acc[k] = Vec::zero();
  const double passes = calls_per_second(seconds, 1, [&] {
    for (std::size_t i = 0; i < n; i += kSums * Vec::W) {
      for (int k = 0; k < kSums; ++k) acc[k] = Vec::add(acc[k], Vec::load(p + i + k * Vec::W));
    }
  });
  float sink[Vec::W];
  T total = acc[0];
  for (int k = 1; k < kSums; ++k) total = Vec::add(total, acc[k]);
  Vec::store(sink, total);
  __asm__ volatile("" : : "r"(sink) : "memory");
  return passes * double(n * sizeof(float));
}

}  // namespace fa::FA_KERNEL_NS
