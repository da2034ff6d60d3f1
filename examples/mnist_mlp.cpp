// MNIST with a 784-512-512-10 MLP. Run: build/examples/mnist_mlp --data data/mnist --epochs 1
#include "common.h"

int main(int argc, char** argv) {
  examples::Args args;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a 784-512-512-10 MLP on MNIST", args, code)) return code;
  return examples::run_main([&] {
    hg::manual_seed(args.seed);
    namespace nn = hg::nn;
    nn::Sequential model{std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 512),
                         std::make_shared<nn::ReLU>(),    std::make_shared<nn::Linear>(512, 512),
                         std::make_shared<nn::ReLU>(),    std::make_shared<nn::Linear>(512, 10)};
    return examples::train_mnist("mlp", model, args);
  });
}
