// Linear, and the parameter-free shape and activation modules: Flatten, ReLU, GELU, SiLU, Tanh,
// Sigmoid, Softmax.
#pragma once

#include "nn/module.h"

namespace hg::nn {

struct LinearOptions {
  bool bias = true;
};

// y = x W^T + b with W [out, in]; W and b ~ U(-1/sqrt(in), 1/sqrt(in)) as PyTorch.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override {
    return fmt::format("in_features={}, out_features={}, bias={}", in_, out_, bias.defined());
  }
  Tensor weight, bias;

 private:
  int64_t in_, out_;
};

// Flattens dims start_dim..end_dim (by default every dim but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string extra_repr() const override { return fmt::format("start_dim={}, end_dim={}", start_, end_); }

 private:
  int64_t start_, end_;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return x.relu(); }
};

struct GELUOptions {
  std::string approximate = "none";  // "none": the exact erf form; "tanh": the tanh approximation
};

class GELU : public Module {
 public:
  explicit GELU(GELUOptions options = {});
  Tensor forward(const Tensor& x) override { return x.gelu(tanh_); }
  std::string extra_repr() const override { return tanh_ ? "approximate='tanh'" : ""; }

 private:
  bool tanh_;
};

// x * sigmoid(x) (also called swish).
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

// softmax along dim (PyTorch's nn.Softmax requires the dim too, in effect).
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("dim={}", dim_); }

 private:
  int64_t dim_;
};

}  // namespace hg::nn
