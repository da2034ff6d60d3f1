// In-place initialisers (no autograd recorded), drawing from the global generator (manual_seed).
#pragma once

#include "framework/tensor.h"

namespace hg::nn::init {

// fan_in and fan_out of a weight [out, in, *kernel] as PyTorch counts them.
std::pair<int64_t, int64_t> fans(const Tensor& weight);

void uniform_(Tensor& t, double low, double high);
void normal_(Tensor& t, double mean = 0.0, double std = 1.0);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)) (leaky ReLU).
// PyTorch's Linear and Conv use a = sqrt(5), which gives bound = 1 / sqrt(fan_in).
void kaiming_uniform_(Tensor& t, double a = 0.0);

}  // namespace hg::nn::init
