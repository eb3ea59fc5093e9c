// The kernel-path choice of the element-wise operators (and the cache size
// that decides whether their outputs stream past the caches) (the norms, RoPE,
// the gated linear units), header-only so each of their libraries compiles
// its own: the paths generic, avx2, avx512 and avx512bf16 (the amx path runs
// avx512bf16's kernels: the tile unit has nothing to do here), asked for by
// the caller, else by FA_ISA, else the fastest this CPU runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "common/cpu_features.h"
#include "common/isa_names.h"

namespace fa::detail {

inline Isa elementwise_path(Isa isa) { return isa == Isa::kAmx ? Isa::kAvx512Bf16 : isa; }

// `built(isa)`: whether the library holds that path's kernels.
template <class Built>
Status choose_elementwise_path(std::optional<Isa> forced, Built built, Isa* isa) {
  if (!forced) {
    if (const char* env = std::getenv("FA_ISA"); env && *env) {
      forced = parse_isa_text(env);
      if (!forced) {
        return Status::Invalid(std::string("FA_ISA=") + env + " is not a kernel path (expected generic, avx2, avx512, "
                               "avx512bf16 or amx)");
      }
    }
  }
  if (forced) {
    if (!built(elementwise_path(*forced))) {
      return Status::Unsupported(std::string("instruction set ") + isa_text(*forced) + " not built into this library");
    }
    if (!cpu_features().has_path(*forced)) {
      return Status::Unsupported(std::string("instruction set ") + isa_text(*forced) + " not supported by this CPU");
    }
    *isa = elementwise_path(*forced);
    return Status::Ok();
  }
  for (Isa candidate : {Isa::kAvx512Bf16, Isa::kAvx512, Isa::kAvx2}) {
    if (built(candidate) && cpu_features().has_path(candidate)) {
      *isa = candidate;
      return Status::Ok();
    }
  }
  *isa = Isa::kGeneric;
  return Status::Ok();
}

// How many CPUs a sysfs cpu list names ("0-1", "0-7,64-71"); 0 if none.
inline int cpu_list_count(const std::string& list) {
  int count = 0;
  std::size_t at = 0;
  while (at < list.size()) {
    char* end = nullptr;
    const long first = std::strtol(list.c_str() + at, &end, 10);
    if (end == list.c_str() + at) break;
    long last = first;
    at = static_cast<std::size_t>(end - list.c_str());
    if (at < list.size() && list[at] == '-') {
      last = std::strtol(list.c_str() + at + 1, &end, 10);
      at = static_cast<std::size_t>(end - list.c_str());
    }
    if (last >= first) count += static_cast<int>(last - first + 1);
    if (at < list.size() && list[at] == ',') ++at;
    else break;
  }
  return count;
}

// The last-level cache these operators can count on keeping their outputs
// in (sysfs: the largest level of cpu0's caches, "32768K", else 32 MiB),
// at most 8 MiB for each CPU sharing it.  Not sysconf's: in a virtual
// machine it can report the whole host's L3 (320 MiB on a 2-vCPU guest
// whose cores share 32 MiB).  The cap is for guests whose sysfs says the
// same (480 MiB "shared by" CPUs 0-1 on a 2-vCPU Xeon): there, 128 MB of
// fp32 norm output did not stream, and every store read its line first
// (RMSNorm fp32 at 16M elements: 4.3-4.9 ms, 2.9-3.0 streamed).  Real
// CPUs hold 2-5 MiB of L3 a core (12 with stacked cache).
inline std::size_t last_level_cache_bytes() {
  static const std::size_t bytes = [] {
    std::size_t best = 0;
    int best_level = 0, sharing = 0;
    for (int index = 0; index < 8; ++index) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
      std::ifstream level_file(dir + "level"), size_file(dir + "size"), shared_file(dir + "shared_cpu_list");
      int level = 0;
      std::string size, shared;
      if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
      std::size_t value = std::strtoull(size.c_str(), nullptr, 10);
      if (size.back() == 'K') value <<= 10;
      if (size.back() == 'M') value <<= 20;
      if (level > best_level && value > 0) {
        best_level = level;
        best = value;
        sharing = (shared_file >> shared) ? cpu_list_count(shared) : 0;
      }
    }
    if (best == 0) return std::size_t{32} << 20;
    return sharing > 0 ? std::min(best, static_cast<std::size_t>(sharing) * (std::size_t{8} << 20)) : best;
  }();
  return bytes;
}

// Whether an element-wise call sends its outputs through non-temporal
// stores: as the caller asked (the operators' stream_output), else when
// the call moves more bytes than the last-level cache holds.
inline bool stream_outputs(const std::optional<bool>& asked, double bytes) {
  return asked ? *asked : bytes > static_cast<double>(last_level_cache_bytes());
}

}  // namespace fa::detail
