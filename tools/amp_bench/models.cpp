// Model definitions (the MNIST ones are examples/models.h) and their portable initialisation.
#include "models.h"

#include <cmath>

#include "examples/models.h"
#include "portable_random.h"
#include "resnet.h"

namespace amp_bench {

namespace nn = hg::nn;

ModelInfo model_info(const std::string& name) {
  if (name == "linear") return {name, {1, 28, 28}, 10, true, 2.0 * 784 * 10};
  if (name == "mnist_mlp") return {name, {1, 28, 28}, 10, true, 2.0 * (784 * 512 + 512 * 512 + 512 * 10)};
  if (name == "mnist_cnn") {
    const double conv1 = 26.0 * 26 * 32 * (1 * 9), conv2 = 24.0 * 24 * 64 * (32 * 9);
    return {name, {1, 28, 28}, 10, true, 2.0 * (conv1 + conv2 + 9216.0 * 128 + 128.0 * 10)};
  }
  if (name == "wide_mlp") return {name, {4096}, 4096, false, 2.0 * 4 * 4096.0 * 4096};
  if (name == "resnet" || name == "resnet18") {
    static const double flops = [] {
      double f = 0;
      resnet18(10, &f);
      return f;
    }();
    return {name, {3, 32, 32}, 10, false, flops};
  }
  if (name == "resnet50") {
    static const double flops = [] {
      double f = 0;
      resnet50(1000, &f);
      return f;
    }();
    return {name, {3, 224, 224}, 1000, false, flops};
  }
  throw hg::Error(fmt::format("[amp_bench] unknown model '{}'", name));
}

namespace {

std::shared_ptr<nn::Sequential> layers(const std::string& name) {
  auto seq = std::make_shared<nn::Sequential>();
  auto relu = [] { return std::make_shared<nn::ReLU>(); };
  if (name == "linear") {
    seq->push_back(std::make_shared<nn::Flatten>()).push_back(std::make_shared<nn::Linear>(784, 10));
  } else if (name == "mnist_mlp") {
    seq = examples::mnist_mlp();
  } else if (name == "mnist_cnn") {
    seq = examples::mnist_cnn();
  } else if (name == "resnet" || name == "resnet18") {
    seq = resnet18(10, nullptr);
  } else if (name == "resnet50") {
    seq = resnet50(1000, nullptr);
  } else if (name == "wide_mlp") {
    for (int i = 0; i < 4; ++i) {
      if (i > 0) seq->push_back(relu());
      seq->push_back(std::make_shared<nn::Linear>(4096, 4096));
    }
  } else {
    model_info(name);  // throws
  }
  return seq;
}

}  // namespace

std::shared_ptr<nn::Sequential> build_model(const std::string& name, uint64_t seed) {
  auto model = layers(name);
  nn::fuse(*model);  // as the examples do: mnist_cnn's convolutions run as their fused ops
  hg::NoGradGuard no_grad;
  const auto params = model->named_parameters();
  // A bias takes the bound of the weight registered just before it (same layer).
  double bound = 1.0;
  for (size_t k = 0; k < params.size(); ++k) {
    const hg::Tensor& p = params[k].second;
    if (p.dim() >= 2) bound = 1.0 / std::sqrt(static_cast<double>(p.numel() / p.size(0)));
    const StreamUniform u(seed, 1000 + k);
    std::vector<float> values(static_cast<size_t>(p.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((2.0 * u(i) - 1.0) * bound);
    hg::Tensor dst = p;
    dst.copy_(hg::tensor(values, p.shape()));
  }
  return model;
}

}  // namespace amp_bench
