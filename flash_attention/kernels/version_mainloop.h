// The loop of the version this translation unit is compiled for
// (FA_LOOP_VERSION, set per version by flash_attention/CMakeLists.txt: each
// kernels/<isa>/kernels_<isa>.cpp is compiled once per version built), and
// the KernelTable that exports it.  Included inside nothing: after the
// path's vec_<isa>.h, with FA_KERNEL_NS defined.
#pragma once

#if FA_LOOP_VERSION == 1
#include "../fa1/fa1_mainloop.h"
#elif FA_LOOP_VERSION == 2
#include "../fa2/fa2_mainloop.h"
#include "../fa2/fa2_stage_timer.h"
#elif FA_LOOP_VERSION == 3
#include "../fa3/fa3_mainloop.h"
#else
#error "FA_LOOP_VERSION must be 1, 2 or 3"
#endif

namespace fa::FA_KERNEL_NS {

#if FA_LOOP_VERSION == 1
using VersionLoop = Fa1Loop;
#elif FA_LOOP_VERSION == 2
using VersionLoop = Fa2Loop;
#else
using VersionLoop = Fa3Loop;
#endif

// The table of this path for the version's loop; `matrix_peak` is the
// path's bf16 unit probe (null without one).
inline constexpr detail::KernelTable kernel_table_of(Isa isa, const char* name, double (*matrix_peak)(double)) {
  return {VersionLoop::kVersion,
          isa,
          name,
          &VersionLoop::workspace_floats,
          &VersionLoop::kv_pack_bytes,
          &VersionLoop::items,
          &run_jobs<VersionLoop>,
          &exp2_array,
          &widen_array,
          &widen_pairs_array,
          &fma_peak_one_thread,
          matrix_peak,
          &read_rate_one_thread,
#if FA_LOOP_VERSION == 2
          &time_stages
#else
          nullptr
#endif
  };
}

}  // namespace fa::FA_KERNEL_NS
