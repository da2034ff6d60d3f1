// Sequential: submodules named "0", "1", ... applied in order. A Conv2d directly followed by a
// ReLU, neither with forward hooks, runs as one conv2d_relu op (same values and gradients).
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace hg::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  // Appends a module (named by its position); returns *this for chaining.
  Sequential& push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const {
    HG_CHECK(i < layers_.size(), "Sequential", "no module {} (there are {})", i, layers_.size());
    return layers_[i];
  }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace hg::nn
