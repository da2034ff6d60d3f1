#include "framework/nn/sequential.h"

namespace hg::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& layer : layers_) y = (*layer)(y);  // with each layer's hooks
  return y;
}

}  // namespace hg::nn
