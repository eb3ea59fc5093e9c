// One persistent pool of worker threads shared by every operator call.
//
// Threads are created the first time a call asks for them and then reused, so
// a call never pays for thread creation.  Work is handed out as item indices
// from one atomic counter: callers order their items so that the most
// expensive come first, which balances uneven (causal) work without a static
// partition.  Nothing is pinned to a core.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fa::detail {

class ThreadPool {
 public:
  using ItemFn = void (*)(void* context, std::int64_t item, int worker);

  static ThreadPool& global();

  // Runs fn(context, item, worker) for every item in [0, num_items) on
  // `threads` threads, the calling thread included (worker 0).  Returns when
  // all items are done.  A call made from inside a pool task runs serially on
  // the calling thread instead of deadlocking.
  void run(std::int64_t num_items, int threads, ItemFn fn, void* context);

  template <class Body>
  void parallel_for(std::int64_t num_items, int threads, Body&& body) {
    run(num_items, threads,
        [](void* ctx, std::int64_t item, int worker) { (*static_cast<Body*>(ctx))(item, worker); },
        &body);
  }

  ~ThreadPool();

 private:
  ThreadPool() = default;
  void ensure_workers(int count);
  void worker_loop(int index);
  void drain(int worker);

  std::mutex call_mutex_;  // one parallel call at a time

  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> workers_;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;

  // The job in flight.
  ItemFn fn_ = nullptr;
  void* context_ = nullptr;
  std::int64_t num_items_ = 0;
  int active_workers_ = 0;  // pool threads taking part (excluding the caller)
  int finished_workers_ = 0;
  std::atomic<std::int64_t> next_item_{0};
};

}  // namespace fa::detail
