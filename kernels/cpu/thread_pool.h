// A small pool of worker threads for CPU kernels. Between jobs a worker checks for the next one
// for a short while (about 100 us) before it sleeps, so back-to-back small ops do not pay a
// wake-up each; OpenBLAS runs single-threaded inside the pool's tasks, so no other threads
// compete for the cores. Workers are bound to CPUs of their own where the process may use enough
// (HG_CPU_BIND=0 leaves them to the scheduler); the calling thread is never bound.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace hg::cpu {

// Number of threads kernels use: HG_NUM_THREADS if set, else the hardware's.
int num_threads();

// The CPU each worker thread is bound to (thread_pool.cpp's choose_worker_cpus), in worker
// order; empty when the workers are not bound (HG_CPU_BIND=0, too few CPUs allowed, one thread).
std::vector<int> worker_cpus();

// Runs task(i) for i in [0, n) on the pool (the calling thread takes part) and returns when all
// are done. Called from inside a task it runs the tasks inline, so nesting never deadlocks.
// The first exception a task throws is rethrown here.
void run_parallel(int64_t n, const std::function<void(int64_t)>& task);

}  // namespace hg::cpu
