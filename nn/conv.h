// Conv1d, Conv2d and the 2-d pooling modules.
#pragma once

#include <vector>

#include "nn/module.h"

namespace hg::nn {

struct Conv2dOptions {
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};
  int64_t groups = 1;
  bool bias = true;
};

// weight [out, in/groups, kh, kw] and bias [out] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// fan_in = in/groups * kh * kw, as PyTorch's default (kaiming-uniform with a = sqrt(5)).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size, Conv2dOptions options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {})
      : Conv2d(in_channels, out_channels, std::vector<int64_t>{kernel_size, kernel_size}, std::move(options)) {}
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one op (conv2d_relu), without this module's hooks: for a custom Module's
  // forward, and what a Sequential runs after nn::fuse (nn/fuse.h).
  Tensor forward_relu(const Tensor& x);
  // max_pool2d(relu(forward(x)), 2) as one op (conv2d_relu_max_pool2d), without hooks; likewise
  // (nn::fuse joins a 2x2 MaxPool2d, MaxPool2d::is_plain_2x2).
  Tensor forward_relu_max_pool(const Tensor& x);
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Conv2dOptions options_;
};

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x [N, C, L] (or [C, L]); weight [out, in/groups, k] and bias [out] initialised as Conv2d's.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  Conv1dOptions options_;
};

struct Pool2dOptions {
  std::vector<int64_t> stride = {};  // empty: the kernel size
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};  // max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // average pooling only
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::vector<int64_t> kernel_size, Pool2dOptions options = {})
      : Module("MaxPool2d"), kernel_(std::move(kernel_size)), options_(std::move(options)) {}
  explicit MaxPool2d(int64_t kernel_size, Pool2dOptions options = {})
      : MaxPool2d(std::vector<int64_t>{kernel_size, kernel_size}, std::move(options)) {}
  Tensor forward(const Tensor& x) override;
  // A 2x2 window with stride 2, no padding or dilation, floor mode: the pool
  // conv2d_relu_max_pool2d applies.
  bool is_plain_2x2() const;

 private:
  std::vector<int64_t> kernel_;
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::vector<int64_t> kernel_size, Pool2dOptions options = {})
      : Module("AvgPool2d"), kernel_(std::move(kernel_size)), options_(std::move(options)) {}
  explicit AvgPool2d(int64_t kernel_size, Pool2dOptions options = {})
      : AvgPool2d(std::vector<int64_t>{kernel_size, kernel_size}, std::move(options)) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<int64_t> kernel_;
  Pool2dOptions options_;
};

}  // namespace hg::nn
