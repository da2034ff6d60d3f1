// Times ProcessGroup::all_reduce (avg, float32) of a gradient-sized buffer: the communication a
// DDP step adds. Run: mpirun -np 2 build/tools/bench_allreduce [MB=2.68] [iterations=50]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "distributed/process_group.h"
#include "framework/ops/creation.h"

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 2.68;  // the MNIST MLP's gradients
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  auto pg = hg::distributed::ProcessGroup::init();
  hg::Tensor t = hg::ones({static_cast<int64_t>(mb * 1e6 / 4)});
  for (int i = 0; i < 5; ++i) pg->all_reduce(t, hg::distributed::ReduceOp::Avg).wait();
  pg->barrier().wait();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) pg->all_reduce(t, hg::distributed::ReduceOp::Avg).wait();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
  if (pg->rank() == 0)
    std::printf("{\"ranks\":%d,\"mb\":%.2f,\"allreduce_ms\":%.3f,\"algbw_gb_s\":%.2f}\n", pg->world_size(), mb, ms,
                mb / ms);
  return 0;
}
