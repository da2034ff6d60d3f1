// Sequential: submodules named "0", "1", ... applied in order. After nn::fuse (nn/fuse.h), runs
// of modules it found fusable (Conv2d, ReLU[, 2x2 MaxPool2d]) run as one op; never without it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <typeinfo>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  // Any number of modules of any types, so make_shared (and nn::sequential) can forward them:
  // make_shared<Sequential>(std::initializer_list<...>{...}) is what the list form needs.
  template <class... M>
  requires(sizeof...(M) > 0 && (std::is_base_of_v<Module, M> && ...)) explicit Sequential(std::shared_ptr<M>... modules)
      : Sequential({std::shared_ptr<Module>(std::move(modules))...}) {}
  // Appends a module (named by its position); returns *this for chaining.
  Sequential& push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const {
    HG_CHECK(i < layers_.size(), "Sequential", "no module {} (there are {})", i, layers_.size());
    return layers_[i];
  }
  // Marks the fusable runs of modules (Conv2d, ReLU, and a 2x2 MaxPool2d after them) to run as one
  // op, and returns them as "i+j[+k] -> op". nn::fuse calls it for every Sequential in a model.
  std::vector<std::string> fuse();
  // The module at i as its own type; throws "[Sequential] ..." naming both types when it is not an M.
  template <class M>
  std::shared_ptr<M> get(size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!typed) wrong_type(i, typeid(M));
    return typed;
  }

 private:
  [[noreturn]] void wrong_type(size_t i, const std::type_info& wanted) const;
  std::vector<std::shared_ptr<Module>> layers_;
  // fused_[i]: how many modules from i on run as one op (0 or 1: none); set by fuse().
  std::vector<uint8_t> fused_;
};

// A shared Sequential of the given modules, for a member in one line:
//   std::shared_ptr<nn::Sequential> body = register_module("body", nn::sequential(
//       std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>()));
template <class... M>
std::shared_ptr<Sequential> sequential(std::shared_ptr<M>... modules) {
  return std::make_shared<Sequential>(std::move(modules)...);
}

}  // namespace hg::nn
