#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/thread_pool.h"

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

}  // namespace
