// Modules over the spatial dims of images: padding (ZeroPad2d, ConstantPad2d, ReflectionPad2d,
// ReplicationPad2d), adaptive pooling (AdaptiveAvgPool2d, AdaptiveMaxPool2d) and Upsample, each a
// thin module over its functional op (pad.h, adaptive_pool.h, interpolate.h), as PyTorch's.
#pragma once

#include <utility>
#include <vector>

#include "framework/ops/interpolate.h"
#include "nn/module.h"

namespace hg::nn {

// Padding of the last two dims: one value for all four sides, or {left, right, top, bottom}.
class ZeroPad2d : public Module {
 public:
  explicit ZeroPad2d(std::vector<int64_t> padding);
  explicit ZeroPad2d(int64_t padding) : ZeroPad2d(std::vector<int64_t>{padding}) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 protected:
  ZeroPad2d(const char* name, std::vector<int64_t> padding);
  std::vector<int64_t> padding_;  // four values
};

class ConstantPad2d : public ZeroPad2d {
 public:
  ConstantPad2d(std::vector<int64_t> padding, double value);
  ConstantPad2d(int64_t padding, double value) : ConstantPad2d(std::vector<int64_t>{padding}, value) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  double value_;
};

class ReflectionPad2d : public ZeroPad2d {
 public:
  explicit ReflectionPad2d(std::vector<int64_t> padding);
  explicit ReflectionPad2d(int64_t padding) : ReflectionPad2d(std::vector<int64_t>{padding}) {}
  Tensor forward(const Tensor& x) override;
};

class ReplicationPad2d : public ZeroPad2d {
 public:
  explicit ReplicationPad2d(std::vector<int64_t> padding);
  explicit ReplicationPad2d(int64_t padding) : ReplicationPad2d(std::vector<int64_t>{padding}) {}
  Tensor forward(const Tensor& x) override;
};

// output_size {oh, ow}, or one value for both; {1, 1} is global average pooling (ResNet's head).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::vector<int64_t> output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(std::vector<int64_t>{output_size}) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  std::vector<int64_t> size_;
};

// forward gives the maxima; forward_with_indices also their indices (PyTorch's return_indices).
class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(std::vector<int64_t> output_size);
  explicit AdaptiveMaxPool2d(int64_t output_size) : AdaptiveMaxPool2d(std::vector<int64_t>{output_size}) {}
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);
  std::string extra_repr() const override;

 private:
  std::vector<int64_t> size_;
};

// interpolate(x, options) as a module: nn::Upsample({.scale_factor = {2}, .mode = "bilinear"}).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  InterpolateOptions options_;
};

}  // namespace hg::nn
