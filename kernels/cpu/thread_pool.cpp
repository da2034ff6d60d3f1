#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
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
    {
      std::lock_guard lock(mutex_);
      task_ = &task;
      next_.store(0);
      total_ = n;
      pending_ = n;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Takes tasks until none are left.
  void drain() {
    const bool was_inside = t_inside_task;
    t_inside_task = true;
    for (int64_t i; (i = next_.fetch_add(1)) < total_;) {
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_all();
    }
    t_inside_task = was_inside;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (!task_) continue;
      }
      drain();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* task_ = nullptr;
  std::atomic<int64_t> next_{0};
  int64_t total_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
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
