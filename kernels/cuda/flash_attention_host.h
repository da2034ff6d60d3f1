// Host side of the flash-attention kernels: the parameter blocks from the op's arguments, the
// dispatch over dtype and padded head dim, and the shared-memory opt-in above 48 KiB.
#pragma once

#include <cstdint>
#include <type_traits>

#include "framework/dispatch.h"
#include "framework/ops/attention_kernels.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention.cuh"

namespace hg::cuda {

inline flash::Operand flash_operand(const Tensor& t) {
  flash::Operand op{t.raw_data(), t.stride(0), t.stride(1), t.stride(2), t.stride(3), false};
  // 16-byte row loads: unit feature stride, whole 8-element chunks, every row start 16-byte aligned
  // (a dim of size 1 never moves the pointer, so its stride does not matter).
  bool aligned = reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
  for (int d = 0; d < 3; ++d) aligned = aligned && (t.size(d) == 1 || t.stride(d) % 8 == 0);
  op.vec = aligned && t.stride(3) == 1 && t.size(3) % 8 == 0;
  return op;
}

inline flash::Params flash_params(const AttentionArgs& a) {
  flash::Params p{};
  p.B = a.q.size(0);
  p.H = a.q.size(1);
  p.L = a.q.size(2);
  p.S = a.k.size(2);
  p.E = a.q.size(3);
  p.Ev = a.v.size(3);
  p.scale = static_cast<float>(a.scale);
  p.causal = a.causal;
  if (a.mask.defined()) {  // bool, or float32 (the op casts a floating mask to the compute dtype)
    p.mask_kind = a.mask.dtype() == kBool ? 1 : 2;
    p.mask = a.mask.raw_data();
    p.m0 = a.mask.stride(0);
    p.m1 = a.mask.stride(1);
    p.m2 = a.mask.stride(2);
    p.m3 = a.mask.stride(3);
  }
  return p;
}

// f(TypeTag<T>{}, std::integral_constant<int, D>{}) for the inputs' 16-bit type and padded head dim.
template <class F>
void dispatch_flash(const AttentionArgs& a, F&& f) {
  const int64_t D = flash_head_dim(a.q.size(3), a.v.size(3));
  auto by_dim = [&]<class T>(TypeTag<T> tag) {
    switch (D) {
      case 32: f(tag, std::integral_constant<int, 32>{}); break;
      case 64: f(tag, std::integral_constant<int, 64>{}); break;
      case 96: f(tag, std::integral_constant<int, 96>{}); break;
      case 128: f(tag, std::integral_constant<int, 128>{}); break;
      default: HG_CHECK(false, "scaled_dot_product_attention", "no flash kernel for head dim {}", D);
    }
  };
  if (a.q.dtype() == kFloat16)
    by_dim(TypeTag<Half>{});
  else
    by_dim(TypeTag<BFloat16>{});
}

// Kernels above 48 KiB of dynamic shared memory must opt in, per device (set on each launch: a
// cheap attribute write, and the current device may change between launches).
template <class K>
void allow_smem(K* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace hg::cuda
