// Which kernel paths this build has, which the CPU can run, and the choice
// between them: forced by the caller, by FA_ISA, or the fastest available.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <memory>
#include <string>
#include <vector>

#include "../kernels/kernel_table.h"
#include "cpu_features.h"
#include "isa_names.h"
#include "thread_pool.h"

namespace fa {
namespace detail {

#if FA_BUILD_GENERIC
extern const KernelTable kKernels_generic;
#endif
#if FA_BUILD_AVX2
extern const KernelTable kKernels_avx2;
#endif
#if FA_BUILD_AVX512
extern const KernelTable kKernels_avx512;
#endif
#if FA_BUILD_AVX512BF16
extern const KernelTable kKernels_avx512bf16;
#endif
#if FA_BUILD_AMX
extern const KernelTable kKernels_amx;
#endif

const KernelTable* kernel_table(Isa isa) {
  switch (isa) {
#if FA_BUILD_GENERIC
    case Isa::kGeneric: return &kKernels_generic;
#endif
#if FA_BUILD_AVX2
    case Isa::kAvx2: return &kKernels_avx2;
#endif
#if FA_BUILD_AVX512
    case Isa::kAvx512: return &kKernels_avx512;
#endif
#if FA_BUILD_AVX512BF16
    case Isa::kAvx512Bf16: return &kKernels_avx512bf16;
#endif
#if FA_BUILD_AMX
    case Isa::kAmx: return &kKernels_amx;
#endif
    default: return nullptr;
  }
}

}  // namespace detail

namespace {

constexpr const auto& kAllIsas = detail::kAllIsaValues;

bool cpu_can_run(Isa isa) {
  const detail::CpuFeatures& f = detail::cpu_features();
  if (isa != Isa::kAmx) return f.has_path(isa);
#if FA_AMX_EMULATION
  return f.has_avx512bf16_path();  // tiles modelled in C++
#else
  // Linux hands out the tile registers only on request (once per process).
  return f.has_amx_path() && detail::request_amx_permission();
#endif
}

// What an ISA needs, named as in the messages.
const char* requirement(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "x86-64";
    case Isa::kAvx2: return "avx2+fma+f16c";
    case Isa::kAvx512: return "avx512f+avx512bw+avx512vl+avx512dq";
    case Isa::kAvx512Bf16: return "avx512f+avx512bw+avx512vl+avx512dq+avx512-vbmi+avx512-vnni+avx512-bf16";
    case Isa::kAmx: return FA_AMX_EMULATION ? "avx512f+avx512bw+avx512vl+avx512dq+avx512-bf16 (amx emulated)"
                                            : "amx-tile+amx-bf16+avx512-bf16+avx512-fp16";
  }
  return "?";
}

// Why the CPU cannot run a path, in one line.
std::string cannot_run(Isa isa) {
  if (isa == Isa::kAmx && !FA_AMX_EMULATION && detail::cpu_features().has_amx_path()) {
    return "the AMX tile registers were refused by the operating system (arch_prctl ARCH_REQ_XCOMP_PERM)";
  }
  return "instruction set " + std::string(requirement(isa)) + " not supported by this CPU (has: " +
         detail::cpu_feature_list() + ")";
}

// "generic, avx2, avx512, avx512bf16 or amx", for messages.
std::string isa_choices() {
  std::string out;
  for (std::size_t i = 0; i < std::size(kAllIsas); ++i) {
    if (i) out += i + 1 == std::size(kAllIsas) ? " or " : ", ";
    out += isa_name(kAllIsas[i]);
  }
  return out;
}

}  // namespace

std::string_view isa_name(Isa isa) { return detail::isa_text(isa); }

std::optional<Isa> parse_isa(std::string_view name) { return detail::parse_isa_text(name); }

bool isa_available(Isa isa) { return detail::kernel_table(isa) != nullptr && cpu_can_run(isa); }

std::string built_isas() {
  std::string out;
  for (Isa isa : kAllIsas) {
    if (!detail::kernel_table(isa)) continue;
    if (!out.empty()) out += ' ';
    out += isa_name(isa);
  }
  return out;
}

std::string cpu_isa_features() { return detail::cpu_feature_list(); }

namespace detail {

// The path for a call: forced, else FA_ISA, else the fastest available.
Status select_isa(const std::optional<Isa>& forced, Isa* chosen) {
  std::optional<Isa> want = forced;
  if (!want) {
    if (const char* env = std::getenv("FA_ISA"); env && *env) {
      want = parse_isa(env);
      if (!want) {
        return Status::Invalid(std::string("FA_ISA=") + env + " is not a kernel path (expected " + isa_choices() + ")");
      }
    }
  }
  if (want) {
    if (!kernel_table(*want)) {
      return Status::Unsupported("kernel path " + std::string(isa_name(*want)) +
                                 " is not in this build (built: " + built_isas() + "; see FA_TARGET)");
    }
    if (!cpu_can_run(*want)) return Status::Unsupported(cannot_run(*want));
    *chosen = *want;
    return Status::Ok();
  }
  // avx512bf16 goes first only where its dot products outpace the FMA loop
  // (CpuFeatures::bf16_dot_outpaces_fma); elsewhere it is the last resort
  // (a build of that path alone), as emulated AMX tiles are.
  for (const bool by_speed : {true, false}) {
    for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {
      if (by_speed && *it == Isa::kAvx512Bf16 && !cpu_features().bf16_dot_outpaces_fma()) continue;
      if (by_speed && *it == Isa::kAmx && FA_AMX_EMULATION) continue;
      if (isa_available(*it)) {
        *chosen = *it;
        return Status::Ok();
      }
    }
  }
  // Only paths the CPU lacks were built (FA_TARGET=avx512 on an AVX2 CPU, say).
  for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {
    if (kernel_table(*it)) return Status::Unsupported(cannot_run(*it));
  }
  return Status::Unsupported("no kernel path was built");
}

}  // namespace detail

Status select_isa(const AttentionParams& p, Isa* isa) { return detail::select_isa(p.isa, isa); }

namespace {

// Runs `probe` on `threads` threads at once (one item each: every thread
// measures its own core while the others do) and sums the rates.
double measure_on_threads(double (*probe)(double), int threads, double seconds) {
  const int n = threads > 0 ? threads : default_thread_count();
  std::vector<double> rates(static_cast<std::size_t>(n), 0.0);
  detail::ThreadPool::global().parallel_for(n, n, [&](std::int64_t item, int) {
    rates[static_cast<std::size_t>(item)] = probe(seconds);
  });
  double total = 0.0;
  for (double r : rates) total += r;
  return total;
}

}  // namespace

double measure_fma_peak_gflops(Isa isa, int threads, double seconds) {
  if (!isa_available(isa)) return 0.0;
  return measure_on_threads(detail::kernel_table(isa)->fma_peak_one_thread, threads, seconds);
}

double measure_matrix_peak_gflops(Isa isa, int threads, double seconds) {
  if (!isa_available(isa) || !detail::kernel_table(isa)->matrix_peak_one_thread) return 0.0;
  return measure_on_threads(detail::kernel_table(isa)->matrix_peak_one_thread, threads, seconds);
}

double measure_read_bandwidth_gbps(Isa isa, int threads, std::size_t bytes, double seconds, bool huge_pages) {
  if (!isa_available(isa)) return 0.0;
  const int n = threads > 0 ? threads : default_thread_count();
  // Each thread's slice a multiple of 64 bytes, at least 64 KiB.
  std::size_t slice = (bytes / std::size_t(n) + 63) / 64 * 64;
  if (slice < (std::size_t{64} << 10)) slice = std::size_t{64} << 10;
  void* buffer = allocate_tensor_memory(slice * std::size_t(n), huge_pages);
  if (!buffer) return 0.0;
  auto read_rate = detail::kernel_table(isa)->read_rate_one_thread;
  std::vector<double> rates(static_cast<std::size_t>(n), 0.0);
  auto slice_of = [&](std::int64_t item) { return static_cast<char*>(buffer) + slice * std::size_t(item); };
  // Each slice's pages first touched (and placed) by the thread that reads
  // it; all written before any thread starts timing.
  detail::ThreadPool::global().parallel_for(n, n, [&](std::int64_t item, int) { std::memset(slice_of(item), 0, slice); });
  detail::ThreadPool::global().parallel_for(n, n, [&](std::int64_t item, int) {
    rates[static_cast<std::size_t>(item)] = read_rate(slice_of(item), slice, seconds);
  });
  std::free(buffer);
  double total = 0.0;
  for (double r : rates) total += r;
  return total / 1e9;
}

namespace {

// dst = src through non-temporal stores (SSE2, on every x86-64): the
// written lines are not read first, as a kernel that streams its output
// writes them.  Both 64-byte aligned, len a multiple of 64.
void copy_streaming(char* dst, const char* src, std::size_t len) {
#if defined(__SSE2__)
  for (std::size_t i = 0; i < len; i += 64) {
    const __m128i a = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  _mm_sfence();
#else
  std::memcpy(dst, src, len);
#endif
}

}  // namespace

double measure_copy_bandwidth_gbps(int threads, std::size_t bytes, double seconds, bool huge_pages) {
  const int used = threads > 0 ? threads : default_thread_count();
  const std::size_t chunk = std::max<std::size_t>(bytes / 2 / std::size_t(used) / 64 * 64, 64);
  const std::size_t half = chunk * std::size_t(used);
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> src(static_cast<char*>(allocate_tensor_memory(half, huge_pages))),
      dst(static_cast<char*>(allocate_tensor_memory(half, huge_pages)));
  if (!src || !dst) return 0.0;
  std::memset(src.get(), 1, half);
  std::memset(dst.get(), 0, half);
  // Two copies, alternating: glibc's memcpy (its store strategy its own:
  // here plain stores, which read each destination line before writing it)
  // and one through non-temporal stores.  The better is the machine's copy
  // bandwidth; memcpy alone read 30-36 GB/s on a Zen 4 host where the
  // streamed copy and the streamed-output kernels moved 46-50 (docs/PERF.md).
  double best = 0.0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int rep = 0; rep < 6 || std::chrono::steady_clock::now() < deadline; ++rep) {
    const bool streaming = rep % 2 == 1;
    const auto t0 = std::chrono::steady_clock::now();
    detail::ThreadPool::global().parallel_for(used, used, [&](std::int64_t item, int) {
      const std::size_t begin = static_cast<std::size_t>(item) * chunk;
      if (streaming) {
        copy_streaming(dst.get() + begin, src.get() + begin, chunk);
      } else {
        std::memcpy(dst.get() + begin, src.get() + begin, chunk);
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(half) / s / 1e9);
    if (rep > 200) break;
  }
  return best;
}


bool uses_matrix_unit(Isa isa, DType dtype, std::int64_t head_dim) {
  if (head_dim <= 0) return false;  // any other: padded to the engines' 32-dim step
  // FP8 inputs are widened exactly to bf16 for the pair engines.
  const bool bf16_pairs = dtype == DType::kBF16 || is_fp8(dtype);
  return (isa == Isa::kAmx && (bf16_pairs || dtype == DType::kF16)) || (isa == Isa::kAvx512Bf16 && bf16_pairs);
}

}  // namespace fa

#include "flash_attention/testing.h"

namespace fa::testing {

bool vector_exp2(Isa isa, const float* in, float* out, int n) {
  if (!isa_available(isa)) return false;
  detail::kernel_table(isa)->exp2_array(in, out, n);
  return true;
}

bool vector_widen(Isa isa, DType dtype, const void* in, float* out, int n, bool row_path) {
  if (!isa_available(isa)) return false;
  detail::kernel_table(isa)->widen_array(dtype, row_path, in, out, n);
  return true;
}

bool vector_widen_pairs(Isa isa, DType dtype, const void* in, float* out, int n, bool value_pairs) {
  return isa_available(isa) && detail::kernel_table(isa)->widen_pairs_array(dtype, value_pairs, in, out, n);
}

bool time_tile_stages(Isa isa, const StageConfig& cfg, StageReport* out) {
  if (!isa_available(isa)) return false;
  const auto time_stages = detail::kernel_table(isa)->time_stages;
  return time_stages != nullptr && time_stages(cfg, out);
}

}  // namespace fa::testing
