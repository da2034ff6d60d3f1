// The parametrised activation modules beyond linear.h's: LeakyReLU, ELU, SELU, Mish, Hardswish,
// Softplus, each a thin module over its functional op (framework/ops/unary.h), as PyTorch's.
#pragma once

#include "nn/module.h"

namespace hg::nn {

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("negative_slope={}", slope_); }

 private:
  double slope_;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : Module("ELU"), alpha_(alpha) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("alpha={}", alpha_); }

 private:
  double alpha_;
};

class SELU : public Module {
 public:
  SELU() : Module("SELU") {}
  Tensor forward(const Tensor& x) override;
};

class Mish : public Module {
 public:
  Mish() : Module("Mish") {}
  Tensor forward(const Tensor& x) override;
};

class Hardswish : public Module {
 public:
  Hardswish() : Module("Hardswish") {}
  Tensor forward(const Tensor& x) override;
};

// log(1 + exp(beta x)) / beta, linear where beta x > threshold.
struct SoftplusOptions {
  double beta = 1.0;
  double threshold = 20.0;
};
class Softplus : public Module {
 public:
  explicit Softplus(SoftplusOptions options = {}) : Module("Softplus"), options_(options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override {
    return fmt::format("beta={}, threshold={}", options_.beta, options_.threshold);
  }

 private:
  SoftplusOptions options_;
};

}  // namespace hg::nn
