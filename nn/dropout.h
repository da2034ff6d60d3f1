// Dropout: active in train mode only.
#pragma once

#include "nn/module.h"

namespace hg::nn {

struct DropoutOptions {
  double p = 0.5;
};

// Zeroes each element with probability p and scales the rest by 1/(1-p) in training; the
// identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(DropoutOptions options = {});
  explicit Dropout(double p) : Dropout(DropoutOptions{.p = p}) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return fmt::format("p={}", p_); }

 private:
  double p_;
};

}  // namespace hg::nn
