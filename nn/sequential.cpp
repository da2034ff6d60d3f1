#include "nn/sequential.h"

#include <fmt/format.h>

#include <typeinfo>

#include "framework/type_name.h"
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

void Sequential::wrong_type(size_t i, const std::type_info& wanted) const {
  fail("Sequential", "get<{}>({}): module {} is a {}", demangle(wanted.name()), i, i, layers_[i]->type_name());
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

std::vector<std::string> Sequential::fuse() {
  fused_.assign(layers_.size(), 0);
  std::vector<std::string> runs;
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    if (!fusable_conv_relu(*layers_[i], *layers_[i + 1])) continue;
    const bool pool = i + 2 < layers_.size() && fusable_pool(*layers_[i + 2]);
    fused_[i] = pool ? 3 : 2;
    runs.push_back(pool ? fmt::format("{}+{}+{} -> conv2d_relu_max_pool2d", i, i + 1, i + 2)
                        : fmt::format("{}+{} -> conv2d_relu", i, i + 1));
    i += fused_[i] - 1;
  }
  return runs;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    // A fused run, unless a module in it was replaced or got a hook since fuse(): then each
    // module runs alone, with its hooks. Same values and gradients either way.
    const size_t run = i < fused_.size() && i + fused_[i] <= layers_.size() ? fused_[i] : 0;
    if (run >= 2) {
      if (Conv2d* conv = fusable_conv_relu(*layers_[i], *layers_[i + 1])) {
        if (run == 3 && fusable_pool(*layers_[i + 2])) {
          y = conv->forward_relu_max_pool(y);
          i += 2;
          continue;
        }
        y = conv->forward_relu(y);  // the pool, if any, runs alone next (it got a hook)
        ++i;
        continue;
      }
    }
    y = (*layers_[i])(y);  // with the layer's hooks
  }
  return y;
}

}  // namespace hg::nn
