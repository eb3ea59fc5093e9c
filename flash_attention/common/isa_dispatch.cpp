// Which kernel paths this build has, which the CPU can run, and the choice
// between them: forced by the caller, by FA_ISA, or the fastest available.
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "../kernels/kernel_table.h"
#include "cpu_features.h"
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
    default: return nullptr;
  }
}

}  // namespace detail

namespace {

constexpr Isa kAllIsas[] = {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512};

bool cpu_can_run(Isa isa) {
  const detail::CpuFeatures& f = detail::cpu_features();
  switch (isa) {
    case Isa::kGeneric: return true;
    case Isa::kAvx2: return f.has_avx2_path();
    case Isa::kAvx512: return f.has_avx512_path();
  }
  return false;
}

// What an ISA needs, named as in the messages.
const char* requirement(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "x86-64";
    case Isa::kAvx2: return "avx2+fma+f16c";
    case Isa::kAvx512: return "avx512f+avx512bw+avx512vl+avx512dq";
  }
  return "?";
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAllIsas) {
    if (isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

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
        return Status::Invalid(std::string("FA_ISA=") + env + " is not a kernel path (expected generic, avx2 or avx512)");
      }
    }
  }
  if (want) {
    if (!kernel_table(*want)) {
      return Status::Unsupported("kernel path " + std::string(isa_name(*want)) +
                                 " is not in this build (built: " + built_isas() + "; see FA_TARGET)");
    }
    if (!cpu_can_run(*want)) {
      return Status::Unsupported("instruction set " + std::string(requirement(*want)) +
                                 " not supported by this CPU (has: " + cpu_feature_list() + ")");
    }
    *chosen = *want;
    return Status::Ok();
  }
  for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {
    if (isa_available(*it)) {
      *chosen = *it;
      return Status::Ok();
    }
  }
  // Only paths the CPU lacks were built (FA_TARGET=avx512 on an AVX2 CPU, say).
  for (auto it = std::rbegin(kAllIsas); it != std::rend(kAllIsas); ++it) {
    if (kernel_table(*it)) {
      return Status::Unsupported("instruction set " + std::string(requirement(*it)) +
                                 " not supported by this CPU (has: " + cpu_feature_list() + ")");
    }
  }
  return Status::Unsupported("no kernel path was built");
}

}  // namespace detail

double measure_fma_peak_gflops(Isa isa, int threads, double seconds) {
  if (!isa_available(isa)) return 0.0;
  const detail::KernelTable* table = detail::kernel_table(isa);
  const int n = threads > 0 ? threads : default_thread_count();
  std::vector<double> rates(static_cast<std::size_t>(n), 0.0);
  // One item per thread; every thread measures its own core at the same time.
  detail::ThreadPool::global().parallel_for(n, n, [&](std::int64_t item, int) {
    rates[static_cast<std::size_t>(item)] = table->fma_peak_one_thread(seconds);
  });
  double total = 0.0;
  for (double r : rates) total += r;
  return total;
}

}  // namespace fa

#include "flash_attention/testing.h"

namespace fa::testing {

bool vector_exp2(Isa isa, const float* in, float* out, int n) {
  if (!isa_available(isa)) return false;
  detail::kernel_table(isa)->exp2_array(in, out, n);
  return true;
}

}  // namespace fa::testing
