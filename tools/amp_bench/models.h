// The four benchmark models (the MNIST ones are the examples', examples/models.h), built with the
// portable initialisation that tools/amp_bench_torch.py reproduces, and their FLOP counts. The
// PyTorch definitions are tools/mnist_models.py.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace amp_bench {

struct ModelInfo {
  std::string name;
  std::vector<int64_t> sample_shape;  // one input sample
  int64_t classes = 10;
  bool mnist_shaped = true;             // can train on MNIST (--real-data)
  double forward_flops_per_sample = 0;  // 2 x multiply-adds of the matmuls and convolutions
};

// Throws hg::Error for an unknown name. Besides the cells' names, the resnet cell's two networks
// by their own names: resnet18 (3x32x32, 10 classes; also "resnet") and resnet50 (3x224x224, 1000
// classes); which one a resnet cell runs is resnet_arch() (runner.h).
ModelInfo model_info(const std::string& name);

// The model with PyTorch's default bounds, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and
// biases, drawn from StreamUniform(seed, 1000 + parameter index) in parameters() order.
std::shared_ptr<hg::nn::Sequential> build_model(const std::string& name, uint64_t seed);

// A training step costs about 3 forward passes (the backward computes input and weight
// gradients, each as large as the forward); the first layer's input gradient, which no one
// needs, is counted too, so this slightly overstates the work.
inline double train_flops_per_step(const ModelInfo& info, int64_t batch) {
  return 3.0 * info.forward_flops_per_sample * static_cast<double>(batch);
}

}  // namespace amp_bench
