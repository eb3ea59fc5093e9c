// Which work item a thread runs next, and what an item covers.
//
// Items are (Q tile group, K/V chunk, unit), a unit being a (batch, head), or
// a (batch, K/V head) when short queries pack a GQA group.  They are numbered
// so the last Q tiles (the most keys under a causal mask) are handed out
// first: dynamic longest-first scheduling balances causal work across
// threads.  A version's loop (`Loop`, see run_jobs) decides how many Q tiles
// an item holds (FA2: one; FA3: a pair) or numbers its items itself (FA1:
// one per (batch, head)).
#pragma once

#include "../common/thread_pool.h"
#include "stage_laps.h"
#include "tile_mask.h"

namespace fa::FA_KERNEL_NS {

inline std::int64_t job_units(const AttentionJob& job) { return job.batch * (job.heads / job.pack_group); }

// Item `item` of a job whose Q tiles come `per_item` at a time, as (the
// group of Q tiles, counted from the last; the chunk; the unit).
struct ItemCoords {
  std::int64_t q_group, split, unit;
};
inline std::int64_t q_groups(const AttentionJob& job, int per_item) { return (job.q_tiles + per_item - 1) / per_item; }
inline ItemCoords item_coords(const AttentionJob& job, std::int64_t item, int per_item) {
  const std::int64_t units = job_units(job);
  return {q_groups(job, per_item) - 1 - item / (units * job.num_splits), (item / units) % job.num_splits, item % units};
}
inline std::int64_t grouped_items(const AttentionJob& job, int per_item) {
  return q_groups(job, per_item) * job_units(job) * job.num_splits;
}

// Q tile `q_tile` of `heads` query heads from head h of batch b (one head,
// or a packed tile's), keys of chunk `split`: its rows, and the keys it
// visits, cut to the union of its rows' windows (whole tiles before the
// first row's window start are skipped).  A packed tile's rows are those of
// each of its heads (TileItem).
inline TileItem tile_item_at(const AttentionJob& job, std::int64_t q_tile, std::int64_t split, std::int64_t b,
                             std::int64_t h, std::int64_t heads) {
  const std::int64_t hk = h / job.kv_group;
  const int step = job.q_step, tkv = job.tile_kv;
  const std::int64_t i0 = q_tile * step;
  const int head_rows = static_cast<int>(job.seq_q - i0 < step ? job.seq_q - i0 : step);
  const int rows = head_rows * static_cast<int>(heads);
  const std::int64_t chunk_begin = split * job.split_keys;
  const std::int64_t first_key = key_begin(job, i0) / tkv * tkv;
  const std::int64_t kv_begin = first_key > chunk_begin ? first_key : chunk_begin;
  std::int64_t kv_end = key_end(job, i0 + head_rows - 1);
  if (kv_end > chunk_begin + job.split_keys) kv_end = chunk_begin + job.split_keys;
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(job.dtype)), kv_es = kv_elem_bytes(job);
  const char* q = static_cast<const char*>(job.q);
  const char* k = static_cast<const char*>(job.k);
  const char* v = static_cast<const char*>(job.v);
  return TileItem{b,
                  h,
                  b * job.heads + h,  // the tile path: one head per unit
                  split,
                  i0,
                  kv_begin,
                  kv_end,
                  rows,
                  (rows + Vec::W - 1) / Vec::W,  // query-row vectors actually in use
                  head_rows,
                  q + (b * job.q_strides[0] + h * job.q_strides[1] + i0 * job.q_strides[2]) * es,
                  k + (b * job.k_strides[0] + hk * job.k_strides[1]) * kv_es,
                  v + (b * job.v_strides[0] + hk * job.v_strides[1]) * kv_es,
                  job.kv_scale[0] ? KvScales{job.kv_scale[0] + b * job.kv_scale_strides[0][0] + hk * job.kv_scale_strides[0][1],
                                             job.kv_scale[1] + b * job.kv_scale_strides[1][0] + hk * job.kv_scale_strides[1][1]}
                                  : KvScales{}};
}

// The K/V heads a packed tile item holds: one, or with their heads side by
// side in each token row several (pack_group a multiple of kv_group), each
// its own tile (kv_head_tile) walking the key tiles beside the others.
inline int tile_kv_heads(const AttentionJob& job) {
  return job.pack_tile && job.pack_group > job.kv_group ? static_cast<int>(job.pack_group / job.kv_group) : 1;
}

// Q tile `q_tile` of `unit` (a (batch, head), or a (batch, K/V head) and
// its packed heads), keys of chunk `split`.
inline TileItem tile_item(const AttentionJob& job, std::int64_t q_tile, std::int64_t split, std::int64_t unit) {
  const std::int64_t unit_heads = job.heads / job.pack_group;
  return tile_item_at(job, q_tile, split, unit / unit_heads, (unit % unit_heads) * job.pack_group,
                      job.pack_tile ? job.pack_group : 1);
}

// The packed tile of the unit's K/V head g (of tile_kv_heads(job)).
inline TileItem kv_head_tile(const AttentionJob& job, std::int64_t q_tile, std::int64_t split, std::int64_t unit, int g) {
  const std::int64_t unit_heads = job.heads / job.pack_group;
  return tile_item_at(job, q_tile, split, unit / unit_heads, (unit % unit_heads) * job.pack_group + g * job.kv_group,
                      job.kv_group);
}

// Every item of `count` jobs in one parallel loop:
// Loop::run_item<DT, kPrefetch>(job, item, thread's scratch).  Several jobs
// (variable-length sequences): one item space, the job found by binary
// search over the running item counts `ends` (computed by the caller: no
// container code in a file built with wide-vector flags).
//
// AttentionParams::profile (job.item_records set): each item's worker, TSC
// span and stage laps are recorded under its number in the loop.
template <class Run>
inline void run_item_recorded(const AttentionJob& job, std::int64_t item, int worker, const Run& run) {
  if (!job.item_records) return run();
  detail::ItemRecord& record = job.item_records[item];
  record.worker = worker;
  tls_item_stage_cycles = record.stage_cycles;
  record.begin = __rdtsc();
  run();
  record.end = __rdtsc();
  tls_item_stage_cycles = nullptr;
}

template <class Loop, DType DT, bool kPrefetch>
void run_all(const AttentionJob* jobs, const std::int64_t* ends, std::size_t count) {
  const AttentionJob& first = jobs[0];
  if (count == 1) {
    detail::ThreadPool::global().parallel_for(Loop::items(first), first.threads, [&first](std::int64_t item, int worker) {
      run_item_recorded(first, item, worker, [&] {
        Loop::template run_item<DT, kPrefetch>(first, item, first.scratch + first.per_thread_floats * worker);
      });
    });
    return;
  }
  detail::ThreadPool::global().parallel_for(ends[count - 1], first.threads, [&](std::int64_t item, int worker) {
    std::size_t lo = 0, hi = count - 1;
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (ends[mid] > item) hi = mid; else lo = mid + 1;
    }
    const AttentionJob& job = jobs[lo];
    run_item_recorded(first, item, worker, [&] {
      Loop::template run_item<DT, kPrefetch>(job, item - (lo == 0 ? 0 : ends[lo - 1]),
                                             job.scratch + job.per_thread_floats * worker);
    });
  });
}

// The KernelTable's `run`: the job's dtype (Q's) and prefetch choice become
// template parameters here, once (FP8 only for loops with Loop::kFp8; loops
// without the prefetch, Loop::kAsync false, are compiled without it).  A
// quantized cache's K/V dtype is a template parameter of the row path only
// (run_rows); the tile loops dequantize into their buffers (load_kv_tile).
template <class Loop, DType DT>
void run_all_prefetch(const AttentionJob* jobs, const std::int64_t* ends, std::size_t count) {
  if constexpr (Loop::kAsync) {
    if (jobs[0].async_prefetch) return run_all<Loop, DT, true>(jobs, ends, count);
  }
  run_all<Loop, DT, false>(jobs, ends, count);
}
template <class Loop>
void run_jobs(const AttentionJob* jobs, const std::int64_t* ends, std::size_t count) {
  switch (jobs[0].dtype) {
    case DType::kF32: run_all_prefetch<Loop, DType::kF32>(jobs, ends, count); break;
    case DType::kF16: run_all_prefetch<Loop, DType::kF16>(jobs, ends, count); break;
    case DType::kBF16: run_all_prefetch<Loop, DType::kBF16>(jobs, ends, count); break;
    case DType::kFP8E4M3:
    case DType::kFP8E5M2:
      // Only loops that take FP8 are compiled for it (FA3; the others refuse it).
      if constexpr (Loop::kFp8) {
        if (jobs[0].dtype == DType::kFP8E4M3) {
          run_all_prefetch<Loop, DType::kFP8E4M3>(jobs, ends, count);
        } else {
          run_all_prefetch<Loop, DType::kFP8E5M2>(jobs, ends, count);
        }
      }
      break;
    case DType::kI8: break;  // a K/V cache dtype only (validation refuses int8 Q)
  }
}

}  // namespace fa::FA_KERNEL_NS
