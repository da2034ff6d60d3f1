// MNIST with a small CNN: conv(1->32, 3x3) -> ReLU -> conv(32->64, 3x3) -> ReLU -> maxpool 2 ->
// flatten -> linear(9216->128) -> ReLU -> linear(128->10).
// Run: build/examples/mnist_cnn --data data/mnist --epochs 1
#include "common.h"

int main(int argc, char** argv) {
  examples::Args args;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a small CNN on MNIST", args, code)) return code;
  return examples::run_main([&] {
    hg::manual_seed(args.seed);
    namespace nn = hg::nn;
    nn::Sequential model{std::make_shared<nn::Conv2d>(1, 32, 3),  std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Conv2d>(32, 64, 3), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::MaxPool2d>(2),      std::make_shared<nn::Flatten>(),
                         std::make_shared<nn::Linear>(9216, 128), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(128, 10)};
    return examples::train_mnist("cnn", model, args);
  });
}
