#include "thread_pool.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace fa::detail {
namespace {

// How long a worker waits for the next call, and the caller for its
// workers, spinning before sleeping.
constexpr int kSpinMicroseconds = 100;

// Spins until done() or kSpinMicroseconds pass; true if done() came true.
// It yields the core between rounds: a thread that spins without yielding
// holds its core from a runnable one, and its CPU time makes the scheduler
// favour others over it once it has work.  Without the yield, the one-token
// decoder layer (oneDNN's OpenMP threads spinning after each product) took
// RoPE and SwiGLU from 15-18 us to 116-119 us; with it they stay at 15-18.
template <class Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
    sched_yield();
  }
}
thread_local bool t_inside_pool_task = false;

struct CpuSet {
  std::mutex mutex;
  bool chosen = false;             // by set_worker_cpus
  cpu_set_t set;
  std::atomic<std::uint64_t> generation{1};
};
CpuSet& cpu_state() {
  static CpuSet state;
  return state;
}

// The process's CPUs: its main thread's affinity (the thread group leader's
// id is the process id), whichever thread asks.
cpu_set_t process_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(getpid(), sizeof(set), &set) != 0 || CPU_COUNT(&set) == 0) {
    CPU_ZERO(&set);
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < hw && i < CPU_SETSIZE; ++i) CPU_SET(i, &set);
  }
  return set;
}
}  // namespace

cpu_set_t worker_cpus() {
  CpuSet& s = cpu_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.chosen) s.set = process_cpus();
  return s.set;
}

int worker_cpu_count() {
  const cpu_set_t set = worker_cpus();
  return std::max(1, CPU_COUNT(&set));
}

bool set_worker_cpus(const std::vector<int>& cpus) {
  const cpu_set_t allowed = process_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) return false;
    CPU_SET(cpu, &set);
  }
  CpuSet& s = cpu_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.chosen = !cpus.empty();
  s.set = s.chosen ? set : allowed;
  s.generation.fetch_add(1, std::memory_order_relaxed);
  return true;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ensure_workers(int count) {
  // Called with call_mutex_ held, so workers_ only grows here.
  while (static_cast<int>(workers_.size()) < count) {
    const int index = static_cast<int>(workers_.size()) + 1;
    workers_.emplace_back([this, index] { worker_loop(index); });
  }
}

void ThreadPool::drain(int worker) {
  const bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;
  for (;;) {
    const std::int64_t item = next_item_.fetch_add(1, std::memory_order_relaxed);
    if (item >= num_items_) break;
    fn_(context_, item, worker);
  }
  t_inside_pool_task = was_inside;
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0, pinned = 0;
  for (;;) {
    std::uint64_t cpus = 0;
    spin_until([&] { return published_.load(std::memory_order_acquire) != seen; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      cpus = cpus_generation_;
      if (index > active_workers_) continue;  // not needed for this job
    }
    if (cpus != pinned) {  // created by (or last pinned for) another CPU set: the library's now
      const cpu_set_t set = worker_cpus();
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      pinned = cpus;
    }
    drain(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_workers_.fetch_add(1, std::memory_order_release);
    }
    done_cv_.notify_one();
  }
}

void ThreadPool::run(std::int64_t num_items, int threads, ItemFn fn, void* context) {
  if (num_items <= 0) return;
  const int helpers = static_cast<int>(std::min<std::int64_t>(std::max(threads, 1), num_items)) - 1;
  if (helpers == 0 || t_inside_pool_task) {
    const bool was_inside = t_inside_pool_task;
    t_inside_pool_task = true;
    for (std::int64_t i = 0; i < num_items; ++i) fn(context, i, 0);
    t_inside_pool_task = was_inside;
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  ensure_workers(helpers);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn;
    context_ = context;
    num_items_ = num_items;
    active_workers_ = helpers;
    finished_workers_.store(0, std::memory_order_relaxed);
    cpus_generation_ = cpu_state().generation.load(std::memory_order_relaxed);
    next_item_.store(0, std::memory_order_relaxed);
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  start_cv_.notify_all();
  drain(0);
  if (spin_until([&] { return finished_workers_.load(std::memory_order_acquire) == helpers; })) return;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return finished_workers_.load(std::memory_order_relaxed) == helpers; });
}

}  // namespace fa::detail
