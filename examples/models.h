// The two MNIST models, defined once for the examples and tools/amp_bench. Their PyTorch twins
// live in tools/mnist_models.py; the model_spec test checks that both define the same layers.
#pragma once

#include <memory>

#include <halfgrad.h>

namespace examples {

// 784-512-512-10 MLP on flattened 28x28 images.
inline std::shared_ptr<hg::nn::Sequential> mnist_mlp() {
  namespace nn = hg::nn;
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(784, 512))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(512, 512))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(512, 10));
  return model;
}

// conv(1->32, 3x3) -> ReLU -> conv(32->64, 3x3) -> ReLU -> maxpool 2 -> flatten ->
// linear(9216->128) -> ReLU -> linear(128->10), on [N, 1, 28, 28] images.
inline std::shared_ptr<hg::nn::Sequential> mnist_cnn() {
  namespace nn = hg::nn;
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(1, 32, 3))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Conv2d>(32, 64, 3))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::MaxPool2d>(2))
      .push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(9216, 128))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(128, 10));
  return model;
}

}  // namespace examples
