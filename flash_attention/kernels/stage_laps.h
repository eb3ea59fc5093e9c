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


// AttentionParams::profile: the stage counters of the item this thread is
// running (set around each item by the scheduler, tile_scheduler.h), null
// when the call is not profiled.  One per translation unit (static): each
// kernel path's file sets and reads its own.
static thread_local std::uint64_t* tls_item_stage_cycles = nullptr;

// FA_STAGE_TIMING and profiling: one item's stage laps (TSC), added by
// finish() to job.stage_cycles and to the profiled item's counters; a no-op
// (no TSC read) when neither is on.  (No destructor: it would give the
// kernel files exception-cleanup symbols.)
class StageLaps {
 public:
  explicit StageLaps(std::uint64_t* out)
      : out_(out), item_(tls_item_stage_cycles), last_(out || item_ ? __rdtsc() : 0) {}
  StageLaps(const StageLaps&) = delete;
  StageLaps& operator=(const StageLaps&) = delete;
  // The time since the previous lap goes to `stage`.
  void lap(TileStage stage) {
    if (!out_ && !item_) return;
    const std::uint64_t now = __rdtsc();
    sum_[stage] += now - last_;
    last_ = now;
  }
  // The last lap goes to `stage`, and the item's sums to the job's counters.
  void finish(TileStage stage) {
    if (!out_ && !item_) return;
    lap(stage);
    if (out_) {
      for (int i = 0; i < kStageCount; ++i) __atomic_fetch_add(out_ + i, sum_[i], __ATOMIC_RELAXED);
    }
    if (item_) {
      for (int i = 0; i < kStageCount; ++i) item_[i] += sum_[i];
    }
  }

 private:
  std::uint64_t* out_;
  std::uint64_t* item_;
  std::uint64_t last_;
  std::uint64_t sum_[kStageCount] = {};
};

}  // namespace fa::FA_KERNEL_NS
