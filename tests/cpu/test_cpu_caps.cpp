// The per-CPU choices made from CpuCaps outside the GEMM router: the elementwise loops' staging
// of float32 maps whose output lies a multiple of 4 KiB from their input, on each kind of CPU
// these machines come in (capabilities passed in), and this machine's reading of its own.
#include <string>

#include "helpers.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/elementwise_choice.h"
#include "kernels/cpu/thread_pool.h"

using namespace hg;
using cpu::CpuCaps;

TEST_CASE("elementwise staging: kept on the Intel with AMX, off on the Zen 4 and the Intel without AVX512_BF16") {
  constexpr CpuCaps amx{.avx2 = true, .avx512 = true, .avx512_bf16 = true, .amx = true, .onednn = true};
  constexpr CpuCaps zen4{.avx2 = true, .avx512 = true, .avx512_bf16 = true, .onednn = true};
  constexpr CpuCaps intel_no_bf16{.avx2 = true, .avx512 = true, .onednn = true};
  constexpr CpuCaps avx2{.avx2 = true};
  CHECK(cpu::elementwise_choice(amx).stage_aliased_maps);
  CHECK_FALSE(cpu::elementwise_choice(zen4).stage_aliased_maps);
  CHECK_FALSE(cpu::elementwise_choice(intel_no_bf16).stage_aliased_maps);
  CHECK_FALSE(cpu::elementwise_choice(avx2).stage_aliased_maps);
  // This machine's choice is the one its capabilities give.
  CHECK(cpu::elementwise_choice().stage_aliased_maps == cpu::elementwise_choice(cpu::cpu_caps()).stage_aliased_maps);
}

TEST_CASE("cpu_caps: consistent with itself, the thread pool and HG_CPU_ONEDNN") {
  const CpuCaps& caps = cpu::cpu_caps();
  CHECK(&caps == &cpu::cpu_caps());  // read once
  CHECK(caps.threads == cpu::num_threads());
  if (caps.avx512_bf16 || caps.amx) CHECK(caps.avx512);
  if (caps.native_off) CHECK_FALSE(caps.onednn);
  if (caps.native_off) CHECK_FALSE(caps.native_bf16());
  const std::string text = cpu::describe(caps);
  CHECK(text.find(std::to_string(caps.threads)) != std::string::npos);
  MESSAGE("this CPU: " << text);
}
