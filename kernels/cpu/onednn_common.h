// What the oneDNN kernels (matmul, convolution) share: the CPU engine, whether this CPU has
// native bfloat16 instructions, and the guard that keeps oneDNN's OpenMP team at one thread.
// Included only where HG_HAVE_ONEDNN is set.
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace hg::cpu {

inline const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// True when oneDNN's kernels for this CPU use bfloat16 dot-product instructions (AVX-512 BF16)
// or AMX tiles; elsewhere oneDNN would emulate them, and halfgrad's float32 paths are faster.
inline bool native_bf16_cpu() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// oneDNN runs on OpenMP (Debian's build uses libgomp). OpenMP workers spin while they wait,
// and on a machine whose cores are all busy (halfgrad's pool, other processes) that spinning
// made a bfloat16 MLP step 10x slower. So while it calls oneDNN a thread asks for a team of
// one, and halfgrad splits the work over its own pool instead. The thread's previous setting
// comes back afterwards: a user's own OpenMP regions on that thread keep their team size.
class OneOpenMPThread {
 public:
  OneOpenMPThread() : previous_(omp_get_max_threads()) {
    if (previous_ != 1) omp_set_num_threads(1);
  }
  ~OneOpenMPThread() {
    if (previous_ != 1) omp_set_num_threads(previous_);
  }
  OneOpenMPThread(const OneOpenMPThread&) = delete;
  OneOpenMPThread& operator=(const OneOpenMPThread&) = delete;

 private:
  int previous_;
};

}  // namespace hg::cpu
