// Flash attention on tensor cores (FlashAttention-2's algorithm) for float16 and bfloat16: the
// route attention.cu takes when flash_attention_supported(args), the existing kernel otherwise.
// The algorithm is modelled step for step on the CPU by tests/cpu/flash_reference.h.
#pragma once

#include "framework/ops/attention_kernels.h"

namespace hg::cuda {

// float16/bfloat16 q, k, v with no dropout, max(E, Ev) <= 128, on an sm_80+ device, unless
// HG_CUDA_FLASH_ATTENTION=0 turns the route off (to time or check the fallback).
bool flash_attention_supported(const AttentionArgs& a);

// The forward of attention_stub: q, k, v and out read and written in place through their strides.
void flash_attention_forward(const Tensor& out, const Tensor& lse, const AttentionArgs& a);

// The backward of attention_backward_stub without a mask gradient (gm undefined): deterministic,
// with no atomics, so two runs give bit-identical gradients.
void flash_attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& o,
                              const Tensor& lse, const AttentionArgs& a);

}  // namespace hg::cuda
