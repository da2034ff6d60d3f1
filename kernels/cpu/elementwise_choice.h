// The elementwise loops' per-CPU choices (kernels/cpu/loops.h), made once from the same CpuCaps
// as the GEMM router's. What depends on the build rather than the CPU stays compile-time there
// (kBf16InRegisters: whether the blocked bfloat16 loops round with vcvtneps2bf16).
#pragma once

#include "kernels/cpu/cpu_caps.h"

namespace hg::cpu {

struct ElementwiseChoice {
  // Whether a float32 unary map whose output lies a multiple of 4 KiB from its input (two fresh
  // page-aligned tensors that fit in cache together) copies the input into a stack buffer a block
  // at a time before mapping it, so no load follows a store to the same page offset (4K
  // aliasing). The CPU decides whether that costs more than it saves (elementwise_choice.cpp).
  bool stage_aliased_maps = false;
};

// The choice for a CPU with these capabilities.
ElementwiseChoice elementwise_choice(const CpuCaps& caps);

// This machine's, made the first time it is asked for.
const ElementwiseChoice& elementwise_choice();

}  // namespace hg::cpu
