// linear_gelu_linear: a transformer's MLP, linear -> GELU (tanh form) -> linear, as one op, so
// that CUDA fuses the GELU and both biases into the GEMMs (cuBLASLt's GELU_AUX_BIAS forward and
// DGELU_BGRAD / BGRADB backward, llm.c's epilogues). The GELU gradient can only ride on the GEMM
// that produces its incoming gradient, the second linear's input gradient, which is why the op
// spans both linears. Explicit, never a pattern match: call it where the model has this pair.
#pragma once

#include "framework/tensor.h"

namespace hg {

// linear(gelu(linear(x, fc_weight, fc_bias), true), proj_weight, proj_bias): fc_weight [hidden,
// in], proj_weight [out, hidden], biases [hidden] and [out] (optional). The same values and
// gradients as that composition: on the CPU it runs its kernels; on CUDA the first GEMM writes
// the GELU and its input (kept for backward) in one pass. Autocast: lower precision, as linear.
Tensor linear_gelu_linear(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
                          const Tensor& proj_bias);

}  // namespace hg
