// MNIST with a small CNN: conv(1->32, 3x3) -> ReLU -> conv(32->64, 3x3) -> ReLU -> maxpool 2 ->
// flatten -> linear(9216->128) -> ReLU -> linear(128->10).
// Run: build/examples/mnist_cnn --data data/mnist --epochs 1
#include "common.h"
#include "models.h"

int main(int argc, char** argv) {
  examples::Args args;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a small CNN on MNIST", args, code)) return code;
  return examples::run_main([&] {
    hg::manual_seed(args.seed);
    auto model = examples::mnist_cnn();
    return examples::train_mnist("cnn", *model, args);
  });
}
