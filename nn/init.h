// In-place initialisers (no autograd recorded), drawing from the global generator (manual_seed).
#pragma once

#include <optional>
#include <string_view>

#include "framework/tensor.h"

namespace hg::nn::init {

// fan_in and fan_out of a weight [out, in, *kernel] as PyTorch counts them.
std::pair<int64_t, int64_t> fans(const Tensor& weight);

void uniform_(Tensor& t, double low, double high);
void normal_(Tensor& t, double mean = 0.0, double std = 1.0);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// The gains of torch.nn.init.calculate_gain: 1 for linear, conv* and sigmoid, 5/3 for tanh,
// sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (slope = param, default 0.01), 3/4 for selu.
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

// Glorot: U(-b, b) with b = gain sqrt(6 / (fan_in + fan_out)); N(0, s^2) with s = gain sqrt(2 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t, double gain = 1.0);
void xavier_normal_(Tensor& t, double gain = 1.0);

// He: with fan = fan_in or fan_out (mode) and gain = calculate_gain(nonlinearity, a),
// U(-b, b) with b = gain sqrt(3 / fan), or N(0, s^2) with s = gain / sqrt(fan). PyTorch's Linear
// and Conv use kaiming_uniform_(w, sqrt(5)), which gives b = 1 / sqrt(fan_in).
enum class FanMode { FanIn, FanOut };
void kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                      std::string_view nonlinearity = "leaky_relu");
void kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                     std::string_view nonlinearity = "leaky_relu");

// N(mean, std^2) restricted to [a, b] (values outside are redrawn), as trunc_normal_.
void trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);

}  // namespace hg::nn::init
