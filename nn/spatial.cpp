// The spatial modules: each forward is one call of its functional op.
#include "nn/spatial.h"

#include "framework/ops/adaptive_pool.h"
#include "framework/ops/pad.h"

namespace hg::nn {

namespace {
// One value for all four sides, or {left, right, top, bottom}.
std::vector<int64_t> four_sides(const char* module, std::vector<int64_t> padding) {
  HG_CHECK(padding.size() == 1 || padding.size() == 4, module,
           "padding takes one value or four (left, right, top, bottom), got {}", padding.size());
  if (padding.size() == 1) padding.assign(4, padding[0]);
  return padding;
}
std::vector<int64_t> two_sizes(const char* module, const std::vector<int64_t>& size) {
  HG_CHECK(size.size() == 1 || size.size() == 2, module, "output_size takes one value or two, got {}", size.size());
  return size.size() == 1 ? std::vector<int64_t>{size[0], size[0]} : size;
}
}  // namespace

ZeroPad2d::ZeroPad2d(std::vector<int64_t> padding) : ZeroPad2d("ZeroPad2d", std::move(padding)) {}
ZeroPad2d::ZeroPad2d(const char* name, std::vector<int64_t> padding)
    : Module(name), padding_(four_sides(name, std::move(padding))) {}
Tensor ZeroPad2d::forward(const Tensor& x) { return pad(x, padding_, "constant", 0.0); }
std::string ZeroPad2d::extra_repr() const { return fmt::format("padding=[{}]", fmt::join(padding_, ", ")); }

ConstantPad2d::ConstantPad2d(std::vector<int64_t> padding, double value)
    : ZeroPad2d("ConstantPad2d", std::move(padding)), value_(value) {}
Tensor ConstantPad2d::forward(const Tensor& x) { return pad(x, padding_, "constant", value_); }
std::string ConstantPad2d::extra_repr() const {
  return fmt::format("padding=[{}], value={}", fmt::join(padding_, ", "), value_);
}

ReflectionPad2d::ReflectionPad2d(std::vector<int64_t> padding) : ZeroPad2d("ReflectionPad2d", std::move(padding)) {}
Tensor ReflectionPad2d::forward(const Tensor& x) { return pad(x, padding_, "reflect"); }

ReplicationPad2d::ReplicationPad2d(std::vector<int64_t> padding) : ZeroPad2d("ReplicationPad2d", std::move(padding)) {}
Tensor ReplicationPad2d::forward(const Tensor& x) { return pad(x, padding_, "replicate"); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::vector<int64_t> output_size)
    : Module("AdaptiveAvgPool2d"), size_(two_sizes("AdaptiveAvgPool2d", output_size)) {}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, size_); }
std::string AdaptiveAvgPool2d::extra_repr() const { return fmt::format("output_size=[{}]", fmt::join(size_, ", ")); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(std::vector<int64_t> output_size)
    : Module("AdaptiveMaxPool2d"), size_(two_sizes("AdaptiveMaxPool2d", output_size)) {}
Tensor AdaptiveMaxPool2d::forward(const Tensor& x) { return adaptive_max_pool2d(x, size_).first; }
std::pair<Tensor, Tensor> AdaptiveMaxPool2d::forward_with_indices(const Tensor& x) {
  return adaptive_max_pool2d(x, size_);
}
std::string AdaptiveMaxPool2d::extra_repr() const { return fmt::format("output_size=[{}]", fmt::join(size_, ", ")); }

Upsample::Upsample(InterpolateOptions options) : Module("Upsample"), options_(std::move(options)) {}
Tensor Upsample::forward(const Tensor& x) { return interpolate(x, options_); }
std::string Upsample::extra_repr() const {
  return options_.size.empty()
             ? fmt::format("scale_factor=[{}], mode={}", fmt::join(options_.scale_factor, ", "), options_.mode)
             : fmt::format("size=[{}], mode={}", fmt::join(options_.size, ", "), options_.mode);
}

}  // namespace hg::nn
