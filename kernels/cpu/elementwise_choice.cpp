#include "kernels/cpu/elementwise_choice.h"

namespace hg::cpu {

// The staging helped on the Intel Xeon with AMX: one-thread float32 tanh on 4M elements went from
// 14 to 6.35 ms, erf 14.5 to 8.6 (8216b8e, 2026-11-25). It costs elsewhere: on the Intel without
// AVX512_BF16, float32 gelu 2.39-2.81 ms staged against 1.95 direct, exp 1.89-1.96 against
// 1.46-1.50 (docs/history/PERF.md, 2026-11-25 18:20); on the Zen 4, the cheap maps (neg, abs,
// relu) that fit in cache (docs/BENCHMARKS.md). AMX is the capability that tells the first
// machine from the other two; staging stays on there, unmeasured since (no such machine here).
ElementwiseChoice elementwise_choice(const CpuCaps& caps) { return ElementwiseChoice{.stage_aliased_maps = caps.amx}; }

const ElementwiseChoice& elementwise_choice() {
  static const ElementwiseChoice choice = elementwise_choice(cpu_caps());
  return choice;
}

}  // namespace hg::cpu
