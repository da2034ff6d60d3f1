// Times ProcessGroup::all_reduce (avg) of a gradient-sized buffer: the communication a DDP step
// adds. MB is the float32 size; "bf16" reduces the same values as bfloat16 natively (DDP's
// reduce_dtype: half the bytes), "bf16-f32" as bfloat16 staged in float32.
// Run: mpirun -np 2 build/tools/bench_allreduce [MB=2.68] [iterations=50] [f32|bf16|bf16-f32]
// (or torchrun-style variables for Gloo).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "distributed/process_group.h"
#include "framework/ops/creation.h"

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 2.68;  // the MNIST MLP's gradients
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  const char* kind = argc > 3 ? argv[3] : "f32";
  const bool bf16 = std::strncmp(kind, "bf16", 4) == 0;
  const auto accumulate =
      std::strcmp(kind, "bf16") == 0 ? hg::distributed::Accumulate::Native : hg::distributed::Accumulate::Float32;
  auto pg = hg::distributed::ProcessGroup::init();
  hg::Tensor t = hg::ones({static_cast<int64_t>(mb * 1e6 / 4)}, hg::TensorOptions(bf16 ? hg::kBFloat16 : hg::kFloat32));
  auto once = [&] { pg->all_reduce(t, hg::distributed::ReduceOp::Avg, accumulate).wait(); };
  for (int i = 0; i < 5; ++i) once();
  pg->barrier().wait();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
  if (pg->rank() == 0)
    std::printf("{\"backend\":\"%s\",\"ranks\":%d,\"kind\":\"%s\",\"float32_mb\":%.2f,\"allreduce_ms\":%.3f}\n",
                pg->backend(), pg->world_size(), kind, mb, ms);
  return 0;
}
