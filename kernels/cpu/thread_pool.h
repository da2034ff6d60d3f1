// A small pool of worker threads for CPU kernels. Workers block (no spinning) between jobs, so
// they never compete with OpenBLAS's own threads for the cores.
#pragma once

#include <cstdint>
#include <functional>

namespace hg::cpu {

// Number of threads kernels use: HG_NUM_THREADS if set, else the hardware's.
int num_threads();

// Runs task(i) for i in [0, n) on the pool (the calling thread takes part) and returns when all
// are done. Called from inside a task it runs the tasks inline, so nesting never deadlocks.
// The first exception a task throws is rethrown here.
void run_parallel(int64_t n, const std::function<void(int64_t)>& task);

}  // namespace hg::cpu
