#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hg::cpu {

namespace {

thread_local bool t_inside_task = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  void run(int64_t n, const std::function<void(int64_t)>& task) {
    std::lock_guard run_lock(run_mutex_);  // one job at a time; callers from other threads queue
    // Each job has its own counters: a worker still leaving the previous job only ever touches
    // that job's (now exhausted) counter, never the new one's (the race ThreadSanitizer found when
    // total_ and next_ were shared between jobs).
    auto job = std::make_shared<Job>(task, n);
    {
      std::lock_guard lock(mutex_);
      job_ = job;
      ++generation_;
    }
    wake_.notify_all();
    drain(*job);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return job->pending == 0; });
    job_.reset();
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  struct Job {
    Job(const std::function<void(int64_t)>& t, int64_t n) : task(t), total(n), pending(n) {}
    const std::function<void(int64_t)>& task;
    const int64_t total;
    std::atomic<int64_t> next{0};
    int64_t pending;           // guarded by mutex_
    std::exception_ptr error;  // guarded by mutex_
  };

  // Takes tasks of `job` until none are left.
  void drain(Job& job) {
    const bool was_inside = t_inside_task;
    t_inside_task = true;
    for (int64_t i; (i = job.next.fetch_add(1)) < job.total;) {
      std::exception_ptr error;
      try {
        job.task(i);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      if (error && !job.error) job.error = error;
      if (--job.pending == 0) done_.notify_all();
    }
    t_inside_task = was_inside;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      if (job) drain(*job);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::shared_ptr<Job> job_;  // the job being run, guarded by mutex_
  uint64_t generation_ = 0;
  bool stop_ = false;
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
