#include "nn/conv.h"

#include <cmath>

#include "framework/ops/conv.h"
#include "framework/ops/creation.h"
#include "framework/ops/pool.h"
#include "nn/init.h"

namespace hg::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size, Conv2dOptions options)
    : Module("Conv2d"), options_(std::move(options)) {
  if (kernel_size.size() == 1) kernel_size.push_back(kernel_size[0]);
  HG_CHECK(kernel_size.size() == 2 && kernel_size[0] > 0 && kernel_size[1] > 0, "Conv2d",
           "kernel_size must be one or two positive values, got {}", kernel_size);
  HG_CHECK(options_.groups > 0 && in_channels > 0 && out_channels > 0 && in_channels % options_.groups == 0 &&
               out_channels % options_.groups == 0,
           "Conv2d", "in_channels {} and out_channels {} must be positive multiples of groups {}", in_channels,
           out_channels, options_.groups);
  register_parameter("weight", weight,
                     empty({out_channels, in_channels / options_.groups, kernel_size[0], kernel_size[1]}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options_.bias) {
    register_parameter("bias", bias, empty({out_channels}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups);
}

Tensor Conv2d::forward_relu(const Tensor& x) {
  return conv2d_relu(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups);
}

Tensor Conv2d::forward_relu_max_pool(const Tensor& x) {
  return conv2d_relu_max_pool2d(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups);
}

std::string Conv2d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=[{}, {}], stride={}, padding={}, dilation={}, groups={}, bias={}",
                     weight.size(1) * options_.groups, weight.size(0), weight.size(2), weight.size(3), options_.stride,
                     options_.padding, options_.dilation, options_.groups, bias.defined());
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options)
    : Module("Conv1d"), options_(options) {
  HG_CHECK(kernel_size > 0, "Conv1d", "kernel_size must be positive, got {}", kernel_size);
  HG_CHECK(options_.groups > 0 && in_channels > 0 && out_channels > 0 && in_channels % options_.groups == 0 &&
               out_channels % options_.groups == 0,
           "Conv1d", "in_channels {} and out_channels {} must be positive multiples of groups {}", in_channels,
           out_channels, options_.groups);
  HG_CHECK(options_.stride > 0 && options_.dilation > 0 && options_.padding >= 0, "Conv1d",
           "stride and dilation must be positive and padding non-negative, got stride {}, padding {}, dilation {}",
           options_.stride, options_.padding, options_.dilation);
  register_parameter("weight", weight, empty({out_channels, in_channels / options_.groups, kernel_size}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options_.bias) {
    register_parameter("bias", bias, empty({out_channels}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups);
}

std::string Conv1d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size={}, stride={}, padding={}, dilation={}, groups={}, bias={}",
                     weight.size(1) * options_.groups, weight.size(0), weight.size(2), options_.stride,
                     options_.padding, options_.dilation, options_.groups, bias.defined());
}

bool MaxPool2d::is_plain_2x2() const {
  const auto all_equal = [](const std::vector<int64_t>& v, int64_t value) {
    return (v.size() == 1 || v.size() == 2) && v.front() == value && v.back() == value;
  };
  return all_equal(kernel_, 2) && (options_.stride.empty() || all_equal(options_.stride, 2)) &&
         all_equal(options_.padding, 0) && all_equal(options_.dilation, 1) && !options_.ceil_mode;
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_, options_.stride, options_.padding, options_.dilation, options_.ceil_mode);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_, options_.stride, options_.padding, options_.ceil_mode, options_.count_include_pad);
}

}  // namespace hg::nn
