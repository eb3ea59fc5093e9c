#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "driver/host_tensor.h"
#include "driver/version_entry.h"

namespace {

using fa::detail::ThreadPool;

TEST(ThreadPool, RunsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(1000);
    ThreadPool::global().parallel_for(1000, threads, [&](std::int64_t i, int worker) {
      EXPECT_GE(worker, 0);
      EXPECT_LT(worker, threads);
      hits[i]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, NestedCallRunsSeriallyInsteadOfDeadlocking) {
  std::atomic<int> inner{0};
  ThreadPool::global().parallel_for(4, 2, [&](std::int64_t, int) {
    ThreadPool::global().parallel_for(5, 2, [&](std::int64_t, int worker) {
      EXPECT_EQ(worker, 0);
      inner++;
    });
  });
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPool, CallsFromSeveralThreadsAreSerializedSafely) {
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) {
        ThreadPool::global().parallel_for(100, 3, [&](std::int64_t i, int) { total += i; });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4L * 20 * (99 * 100 / 2));
}

// The CPU-set rule (thread_pool.h): a caller pinned to one CPU gets the
// process's thread count and plan, and the workers run on the whole set,
// not on the caller's CPU.
cpu_set_t process_set() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(getpid(), sizeof(set), &set), 0);
  return set;
}

// Runs `fn` on a new thread pinned to CPU `cpu` (the process's first when -1).
template <class Fn>
void on_pinned_thread(Fn&& fn) {
  const cpu_set_t all = process_set();
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
    fn();
  });
  t.join();
}

// The affinity masks the pool's workers (not the caller, worker 0, which
// keeps its own) ran a job of `items` items on `threads` threads with.  The
// items last long enough that the workers take some: the caller alone would
// otherwise finish them all before a worker wakes.
std::vector<cpu_set_t> worker_masks(std::int64_t items, int threads) {
  std::mutex m;
  std::vector<cpu_set_t> seen;
  ThreadPool::global().parallel_for(items, threads, [&](std::int64_t, int worker) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (worker == 0) return;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    sched_getaffinity(0, sizeof(mine), &mine);
    std::lock_guard<std::mutex> lock(m);
    seen.push_back(mine);
  });
  return seen;
}

TEST(CpuSet, PinnedCallerGetsTheProcessThreadCount) {
  const cpu_set_t all = process_set();
  int pinned_count = 0;
  on_pinned_thread([&] { pinned_count = fa::default_thread_count(); });
  EXPECT_EQ(pinned_count, CPU_COUNT(&all));
  EXPECT_EQ(fa::default_thread_count(), CPU_COUNT(&all));
}

TEST(CpuSet, WorkersRunOnTheWholeSetWhenAPinnedCallerStartsThem) {
  const cpu_set_t all = process_set();
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one CPU: nothing to tell apart";
  std::vector<cpu_set_t> seen;
  // Enough threads that the pool has to create some here, under the pin.
  on_pinned_thread([&] { seen = worker_masks(64, 6); });
  ASSERT_FALSE(seen.empty());
  for (const cpu_set_t& s : seen) EXPECT_TRUE(CPU_EQUAL(&s, &all)) << "a worker kept the caller's pin";
}

TEST(CpuSet, NarrowedAndRestored) {
  const cpu_set_t all = process_set();
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  ASSERT_TRUE(fa::detail::set_worker_cpus({first}));
  EXPECT_EQ(fa::detail::worker_cpu_count(), 1);
  const std::vector<cpu_set_t> seen = worker_masks(32, 4);
  ASSERT_FALSE(seen.empty());
  for (const cpu_set_t& s : seen) EXPECT_TRUE(CPU_COUNT(&s) == 1 && CPU_ISSET(first, &s));
  EXPECT_FALSE(fa::detail::set_worker_cpus({CPU_SETSIZE + 5}));
  ASSERT_TRUE(fa::detail::set_worker_cpus({}));
  EXPECT_EQ(fa::detail::worker_cpu_count(), CPU_COUNT(&all));
}

// The library's own pool and plan, through the public API: the same plan and
// the same bits from a pinned caller as from an unpinned one (an fp32 MQA
// decode over 777 keys, whose split count follows the thread count).
TEST(CpuSet, PinnedCallerGetsTheSamePlanAndBits) {
  fa::AttentionParams p;
  p.seq_q = 1;
  p.seq_kv = 777;
  p.num_heads = 8;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  p.num_splits = fa::kSplitsAuto;
  const std::int64_t nq = 8 * 64, nkv = 777 * 64;
  fa::cli::HostBuffer q(nq * 4), k(nkv * 4), v(nkv * 4), o1(nq * 4), o2(nq * 4);
  fa::cli::fill_normal(q.data(), fa::DType::kF32, nq, 1, 1.0);
  fa::cli::fill_normal(k.data(), fa::DType::kF32, nkv, 2, 1.0);
  fa::cli::fill_normal(v.data(), fa::DType::kF32, nkv, 3, 1.0);
  auto call = [&](void* out, fa::TilePlan* plan) {
    fa::AttentionTensors t;
    t.q = fa::make_view(q.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 8, 1, 64);
    t.k = fa::make_view(k.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 1, 777, 64);
    t.v = fa::make_view(v.data(), fa::DType::kF32, fa::Layout::kBSH, 1, 1, 777, 64);
    t.o = fa::make_view(out, fa::DType::kF32, fa::Layout::kBSH, 1, 8, 1, 64);
    ASSERT_TRUE(fa::plan(fa::cli::kVersion, p, fa::DType::kF32, plan).ok());
    ASSERT_TRUE(fa::cli::kForward(p, t).ok());
  };
  fa::TilePlan pinned, free;
  on_pinned_thread([&] { call(o1.data(), &pinned); });
  call(o2.data(), &free);
  EXPECT_EQ(pinned.threads, free.threads);
  EXPECT_EQ(pinned.num_splits, free.num_splits);
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), nq * 4));
}

}  // namespace
