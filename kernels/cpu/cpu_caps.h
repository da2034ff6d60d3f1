// What this CPU and this build offer the CPU kernels, read once (cpu_caps()): the one place
// halfgrad asks the CPU for its instruction sets and the environment for HG_CPU_ONEDNN. The GEMM
// router (kernels/cpu/gemm/route.h) and the elementwise loops (kernels/cpu/elementwise_choice.h)
// take a CpuCaps as an argument, so tests pass in the capabilities of machines they do not run
// on.
#pragma once

#include <string>

namespace hg::cpu {

struct CpuCaps {
  bool avx2 = false;
  bool avx512 = false;       // AVX-512 F, BW, VL and DQ (oneDNN's avx512_core)
  bool avx512_bf16 = false;  // the bfloat16 dot-product instruction (vdpbf16ps) and its conversions
  bool amx = false;          // AMX tiles with bfloat16 (Intel Sapphire Rapids and later)
  // oneDNN is built in and not turned off by HG_CPU_ONEDNN=0. That switch (for comparisons, and
  // for the cpu_openblas suite) also keeps bfloat16 off the CPU's bfloat16 instructions: every
  // 16-bit product is then widened to float32, as on a CPU without them.
  bool onednn = false;
  bool native_off = false;  // HG_CPU_ONEDNN=0 was given
  int threads = 1;          // the kernels' thread pool (HG_NUM_THREADS, else every core)

  // Whether bfloat16 products may run on the CPU's bfloat16 units (AVX-512 BF16 or AMX).
  bool native_bf16() const { return avx512 && (avx512_bf16 || amx) && !native_off; }
};

// This machine's capabilities, read the first time it is called.
const CpuCaps& cpu_caps();

// The capabilities in a few words ("avx2 avx512 avx512_bf16, oneDNN, 2 threads"), for benchmark headers.
std::string describe(const CpuCaps& caps);

}  // namespace hg::cpu
