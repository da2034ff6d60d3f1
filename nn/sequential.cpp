#include "nn/sequential.h"

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "nn/conv.h"
#include "nn/linear.h"

namespace hg::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
  return *this;
}

namespace {
// "hg::nn::Linear" rather than the mangled "N2hg2nn6LinearE".
std::string readable(const std::type_info& type) {
  int status = 0;
  char* name = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : type.name();
  std::free(name);
  return out;
}
}  // namespace

void Sequential::wrong_type(size_t i, const std::type_info& wanted) const {
  fail("Sequential", "get<{}>({}): module {} is a {}", readable(wanted), i, i, layers_[i]->type_name());
}

namespace {
// The Conv2d of a Conv2d followed by a ReLU that may run as one conv2d_relu op: both exactly
// those classes (a subclass may override forward) and neither with forward hooks.
Conv2d* fusable_conv_relu(Module& first, Module& second) {
  if (typeid(first) != typeid(Conv2d) || typeid(second) != typeid(ReLU)) return nullptr;
  if (first.has_forward_hooks() || second.has_forward_hooks()) return nullptr;
  return static_cast<Conv2d*>(&first);
}
// A 2x2 MaxPool2d (exactly that class, no hooks) that may join the conv2d_relu before it.
bool fusable_pool(Module& m) {
  return typeid(m) == typeid(MaxPool2d) && !m.has_forward_hooks() && static_cast<MaxPool2d&>(m).is_plain_2x2();
}
}  // namespace

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (i + 1 < layers_.size()) {
      if (Conv2d* conv = fusable_conv_relu(*layers_[i], *layers_[i + 1])) {
        // The same values and gradients as the modules, in one op.
        if (i + 2 < layers_.size() && fusable_pool(*layers_[i + 2])) {
          y = conv->forward_relu_max_pool(y);
          i += 2;
        } else {
          y = conv->forward_relu(y);
          ++i;
        }
        continue;
      }
    }
    y = (*layers_[i])(y);  // with the layer's hooks
  }
  return y;
}

}  // namespace hg::nn
