// nn::fuse: the module fusions halfgrad applies, explicit as PyTorch's fuse_modules. Without it
// every module runs alone; with it, a Conv2d, ReLU and 2x2 MaxPool2d in a row inside a Sequential
// run as one conv2d_relu_max_pool2d op (or conv2d_relu without the pool): the same values and
// gradients, one pass over the activations (docs/AMP.md, "What the training step fuses").
// A model written as a custom Module calls those ops directly (Conv2d::forward_relu_max_pool).
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

// Fuses what it can in every Sequential of `model` (the model itself included) and returns what it
// fused, e.g. "features: 0+1+2 -> conv2d_relu_max_pool2d" ("" names the model itself). A module
// replaced or hooked after fuse() runs alone again. Call it again after changing the model.
std::vector<std::string> fuse(Module& model);

}  // namespace hg::nn
