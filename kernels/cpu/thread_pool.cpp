#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace hg::cpu {

namespace {

thread_local bool t_inside_task = false;

// How long a thread with nothing to do keeps checking for work before it sleeps. An eager
// training step runs hundreds of small parallel ops back to back, a few microseconds of
// single-threaded dispatch apart: a worker that slept after each would be woken (a futex call
// and a context switch, tens of microseconds in a VM) for every one of them. Bounded, so an
// idle program, or processes sharing the cores (ranks under mpirun), lose almost nothing.
constexpr auto kSpinTime = std::chrono::microseconds(100);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Calls ready() in a loop for up to kSpinTime; whether it became true.
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 63) == 63) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();  // lets another process on this core run meanwhile
    }
  }
}

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    // A thread that cannot start (std::system_error at a process or memory limit) leaves the pool
    // smaller instead of escaping from whichever op first ran in parallel: jobs hand out indices
    // from a shared counter, so the caller and the workers that did start still finish them.
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error&) {
    }
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void run(int64_t n, const std::function<void(int64_t)>& task) {
    std::lock_guard run_lock(run_mutex_);  // one job at a time; callers from other threads queue
    // Each job has its own counters: a worker still leaving the previous job only ever touches
    // that job's (now exhausted) counter, never the new one's (the race ThreadSanitizer found when
    // the counters were shared between jobs).
    auto job = std::make_shared<Job>(task, n);
    bool wake_sleepers = false;
    {
      std::lock_guard lock(mutex_);
      job_ = job;
      generation_.fetch_add(1);
      wake_sleepers = sleepers_ > 0;  // a worker not yet asleep sees the new generation itself
    }
    if (wake_sleepers) wake_.notify_all();
    drain(*job);
    if (!spin_until([&] { return job->pending.load() == 0; })) {
      std::unique_lock lock(mutex_);
      job->caller_waiting.store(true);
      done_.wait(lock, [&] { return job->pending.load() == 0; });
    }
    {
      std::lock_guard lock(mutex_);
      if (job_ == job) job_.reset();
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  struct Job {
    Job(const std::function<void(int64_t)>& t, int64_t n) : task(t), total(n), pending(n) {}
    const std::function<void(int64_t)>& task;
    const int64_t total;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> pending;
    // Set (under mutex_) once the caller sleeps on done_: whoever finishes the last task then
    // takes mutex_ and wakes it. Both sides use sequentially consistent accesses of this flag and
    // `pending`, so either the caller sees pending == 0 or the finisher sees the flag.
    std::atomic<bool> caller_waiting{false};
    std::mutex error_mutex;
    std::exception_ptr error;  // guarded by error_mutex; read by the caller once pending is 0
  };

  // Takes tasks of `job` until none are left.
  void drain(Job& job) {
    const bool was_inside = t_inside_task;
    t_inside_task = true;
    for (int64_t i; (i = job.next.fetch_add(1)) < job.total;) {
      try {
        job.task(i);
      } catch (...) {
        std::lock_guard lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
      }
      if (job.pending.fetch_sub(1) == 1 && job.caller_waiting.load()) {
        std::lock_guard lock(mutex_);
        done_.notify_all();
      }
    }
    t_inside_task = was_inside;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return generation_.load() != seen; })) {
        std::unique_lock lock(mutex_);
        ++sleepers_;
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        --sleepers_;
      }
      std::shared_ptr<Job> job;
      {
        std::lock_guard lock(mutex_);
        if (stop_) return;
        seen = generation_.load();
        job = job_;
      }
      if (job) drain(*job);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::shared_ptr<Job> job_;             // the job being run, guarded by mutex_
  std::atomic<uint64_t> generation_{0};  // written under mutex_, read anywhere
  int sleepers_ = 0;                     // workers waiting on wake_, guarded by mutex_
  bool stop_ = false;                    // guarded by mutex_
};

ThreadPool& pool() {
  static auto* p = new ThreadPool(num_threads());  // never destroyed: kernels may run at exit
  return *p;
}

}  // namespace

int num_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("HG_NUM_THREADS")) {
      const int v = std::atoi(env);
      if (v > 0) return v;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

void run_parallel(int64_t n, const std::function<void(int64_t)>& task) {
  if (n <= 0) return;
  if (n == 1 || t_inside_task || num_threads() == 1) {
    for (int64_t i = 0; i < n; ++i) task(i);
    return;
  }
  pool().run(n, task);
}

}  // namespace hg::cpu
