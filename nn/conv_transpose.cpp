#include "nn/conv_transpose.h"

#include <cmath>

#include "framework/ops/conv_transpose.h"
#include "framework/ops/creation.h"
#include "nn/init.h"

namespace hg::nn {

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
                                 ConvTranspose2dOptions options)
    : Module("ConvTranspose2d"), options_(std::move(options)) {
  if (kernel_size.size() == 1) kernel_size.push_back(kernel_size[0]);
  HG_CHECK(kernel_size.size() == 2 && kernel_size[0] > 0 && kernel_size[1] > 0, "ConvTranspose2d",
           "kernel_size must be one or two positive values, got {}", kernel_size);
  HG_CHECK(options_.groups > 0 && in_channels > 0 && out_channels > 0 && in_channels % options_.groups == 0 &&
               out_channels % options_.groups == 0,
           "ConvTranspose2d", "in_channels {} and out_channels {} must be positive multiples of groups {}", in_channels,
           out_channels, options_.groups);
  // PyTorch's layout [in, out/groups, kh, kw]; kaiming_uniform_ reads fan_in from dim 1, as there.
  register_parameter("weight", weight,
                     empty({in_channels, out_channels / options_.groups, kernel_size[0], kernel_size[1]}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options_.bias) {
    register_parameter("bias", bias, empty({out_channels}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight, bias, options_.stride, options_.padding, options_.output_padding, options_.groups,
                          options_.dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  return fmt::format(
      "{}, {}, kernel_size=[{}, {}], stride={}, padding={}, output_padding={}, dilation={}, groups={}, bias={}",
      weight.size(0), weight.size(1) * options_.groups, weight.size(2), weight.size(3), options_.stride,
      options_.padding, options_.output_padding, options_.dilation, options_.groups, bias.defined());
}

}  // namespace hg::nn
