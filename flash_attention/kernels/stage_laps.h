// FA_STAGE_TIMING=1: where a tile loop's time goes, lapped with the TSC at
// its stage boundaries (detail::TileStage).
#pragma once

#include <x86intrin.h>

#include "tile_state.h"

namespace fa::FA_KERNEL_NS {

using detail::TileStage;
using detail::kStageQ;
using detail::kStageKv;
using detail::kStageScores;
using detail::kStageSoftmax;
using detail::kStageRescale;
using detail::kStagePv;
using detail::kStageEpilogue;
using detail::kStageCount;


// FA_STAGE_TIMING: one item's stage laps (TSC), added to job.stage_cycles
// by finish(); a no-op (no TSC read) when the job is not timed.  (No
// destructor: it would give the kernel files exception-cleanup symbols.)
class StageLaps {
 public:
  explicit StageLaps(std::uint64_t* out) : out_(out), last_(out ? __rdtsc() : 0) {}
  StageLaps(const StageLaps&) = delete;
  StageLaps& operator=(const StageLaps&) = delete;
  // The time since the previous lap goes to `stage`.
  void lap(TileStage stage) {
    if (!out_) return;
    const std::uint64_t now = __rdtsc();
    sum_[stage] += now - last_;
    last_ = now;
  }
  // The last lap goes to `stage`, and the item's sums to the job's counters.
  void finish(TileStage stage) {
    if (!out_) return;
    lap(stage);
    for (int i = 0; i < kStageCount; ++i) __atomic_fetch_add(out_ + i, sum_[i], __ATOMIC_RELAXED);
  }

 private:
  std::uint64_t* out_;
  std::uint64_t last_;
  std::uint64_t sum_[kStageCount] = {};
};

}  // namespace fa::FA_KERNEL_NS
