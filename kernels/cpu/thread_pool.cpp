#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sched.h>
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

// The CPUs the workers are bound to, one each: those this process may run on (its affinity mask,
// so taskset, cgroups and mpirun's binding are kept), less the one the creating thread is on, in
// order. Empty, binding nothing, where there are fewer than workers, off Linux, or with
// HG_CPU_BIND=0. The calling thread is never bound: it is the user's.
//
// Left to the scheduler, a worker and the caller shared one vCPU of the 2-vCPU Zen 4 for long
// stretches (a worker spinning for work saw 11-294 of 404 jobs; the caller ran the rest of the
// chunks itself, two threads no faster than one), and the balancer does not split two threads it
// sees running hot. Bound, the worker ran 400-404 of the 404 second chunks in the same minutes.
std::vector<int> choose_worker_cpus(int workers) {
  std::vector<int> cpus;
#if defined(__linux__)
  const char* env = std::getenv("HG_CPU_BIND");
  if (workers <= 0 || (env != nullptr && std::string_view(env) == "0")) return cpus;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return cpus;
  const int caller = sched_getcpu();
  for (int c = 0; c < CPU_SETSIZE && static_cast<int>(cpus.size()) < workers; ++c) {
    if (CPU_ISSET(c, &allowed) && c != caller) cpus.push_back(c);
  }
  if (static_cast<int>(cpus.size()) < workers) cpus.clear();
#endif
  return cpus;
}

// Binds the calling thread to `cpu`; a refusal leaves it unbound, which only costs speed.
void bind_this_thread(int cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
#else
  (void)cpu;
#endif
}

class ThreadPool {
 public:
  explicit ThreadPool(int threads) : worker_cpus_(choose_worker_cpus(threads - 1)) {
    // A thread that cannot start (std::system_error at a process or memory limit) leaves the pool
    // smaller instead of escaping from whichever op first ran in parallel: jobs hand out indices
    // from a shared counter, so the caller and the workers that did start still finish them.
    try {
      for (int i = 1; i < threads; ++i) {
        const int cpu = worker_cpus_.empty() ? -1 : worker_cpus_[static_cast<size_t>(i - 1)];
        workers_.emplace_back([this, cpu] {
          if (cpu >= 0) bind_this_thread(cpu);
          work();
        });
      }
    } catch (const std::system_error&) {
    }
  }
  const std::vector<int>& worker_cpus() const { return worker_cpus_; }

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

  const std::vector<int> worker_cpus_;  // the CPU worker i binds to, or empty
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

std::vector<int> worker_cpus() { return num_threads() > 1 ? pool().worker_cpus() : std::vector<int>{}; }

void run_parallel(int64_t n, const std::function<void(int64_t)>& task) {
  if (n <= 0) return;
  if (n == 1 || t_inside_task || num_threads() == 1) {
    for (int64_t i = 0; i < n; ++i) task(i);
    return;
  }
  pool().run(n, task);
}

}  // namespace hg::cpu
