// ConvTranspose2d: conv_transpose2d (framework/ops/conv_transpose.h) with its weight and bias.
#pragma once

#include <vector>

#include "nn/module.h"

namespace hg::nn {

struct ConvTranspose2dOptions {
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> output_padding = {0, 0};
  int64_t groups = 1;
  bool bias = true;
  std::vector<int64_t> dilation = {1, 1};
};

// weight [in, out/groups, kh, kw] and bias [out] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = out/groups * kh * kw (PyTorch computes it from weight.size(1), as for Conv2d).
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
                  ConvTranspose2dOptions options = {});
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose2dOptions options = {})
      : ConvTranspose2d(in_channels, out_channels, std::vector<int64_t>{kernel_size, kernel_size}, std::move(options)) {
  }
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  ConvTranspose2dOptions options_;
};

}  // namespace hg::nn
