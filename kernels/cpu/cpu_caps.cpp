#include "kernels/cpu/cpu_caps.h"

#include <cpuid.h>

#include <cstdlib>
#include <string_view>
#include <utility>

#include "kernels/cpu/thread_pool.h"

namespace hg::cpu {
namespace {

// AMX with bfloat16: CPUID leaf 7, EDX bits 22 (AMX-BF16) and 24 (AMX-TILE). GCC 12's
// __builtin_cpu_supports has no name for them. (oneDNN asks the kernel for the tile state itself
// before it uses them.)
bool cpu_has_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx >> 22 & 1U) != 0 && (edx >> 24 & 1U) != 0;
}

CpuCaps read_caps() {
  CpuCaps caps;
  __builtin_cpu_init();
  caps.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  caps.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  caps.avx512_bf16 = caps.avx512 && __builtin_cpu_supports("avx512bf16");
  caps.amx = caps.avx512 && cpu_has_amx_bf16();
  const char* env = std::getenv("HG_CPU_ONEDNN");
  caps.native_off = env != nullptr && std::string_view(env) == "0";
  caps.onednn = HG_HAVE_ONEDNN && !caps.native_off;
  caps.threads = num_threads();
  return caps;
}

}  // namespace

const CpuCaps& cpu_caps() {
  static const CpuCaps caps = read_caps();
  return caps;
}

std::string describe(const CpuCaps& caps) {
  std::string s;
  for (const auto& [has, name] : {std::pair{caps.avx2, "avx2"}, std::pair{caps.avx512, "avx512"},
                                  std::pair{caps.avx512_bf16, "avx512_bf16"}, std::pair{caps.amx, "amx"}})
    if (has) s += s.empty() ? name : std::string(" ") + name;
  if (s.empty()) s = "no avx2";
  s += caps.onednn ? ", oneDNN" : caps.native_off ? ", oneDNN off (HG_CPU_ONEDNN=0)" : ", built without oneDNN";
  s += ", " + std::to_string(caps.threads) + (caps.threads == 1 ? " thread" : " threads");
  return s;
}

}  // namespace hg::cpu
