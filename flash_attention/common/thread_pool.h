// One persistent pool of worker threads shared by every operator call.
//
// Threads are created the first time a call asks for them and then reused, so
// a call never pays for thread creation.  Work is handed out as item indices
// from one atomic counter: callers order their items so that the most
// expensive come first, which balances uneven (causal) work without a static
// partition.
//
// Which CPUs: the library's CPU set — the process's (its main thread's
// affinity, read once), or what set_worker_cpus chose — never the calling
// thread's.  The default thread count is its size, and every worker runs on
// that whole set (re-pinned when it changes), so a caller pinned to one core
// neither squeezes later calls onto it nor gets a different plan (and
// different bits) than an unpinned one.  The calling thread, which takes
// part as worker 0, keeps its own affinity.
//
// Between calls a worker spins a short while (100 us, yielding its core
// between rounds) before it sleeps, and the caller spins as long for the
// last worker to finish: a sleeping thread's wake-up (a futex, and in a
// virtual machine a halted vCPU) costs tens of microseconds.  On a 2-vCPU
// Xeon guest a 16-row RMSNorm on 2 threads took 48-73 us with both sides
// sleeping at once and 4.5 us spinning; a 512-key decoding step 91 -> 53-66 us.
#pragma once

#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace fa::detail {

// The library's CPU set (see above), and its size.
cpu_set_t worker_cpus();
int worker_cpu_count();
// Sets it (an empty list restores the process's); false when a CPU is not
// one the process may run on.
bool set_worker_cpus(const std::vector<int>& cpus);

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
  std::atomic<std::uint64_t> published_{0};  // generation_, for workers spinning outside the lock
  bool stopping_ = false;
  std::uint64_t cpus_generation_ = 0;  // set_worker_cpus' count when the job started

  // The job in flight.
  ItemFn fn_ = nullptr;
  void* context_ = nullptr;
  std::int64_t num_items_ = 0;
  int active_workers_ = 0;  // pool threads taking part (excluding the caller)
  std::atomic<int> finished_workers_{0};  // changed under mutex_; read by a spinning caller
  std::atomic<std::int64_t> next_item_{0};
};

}  // namespace fa::detail
