// MNIST with a 784-512-512-10 MLP. Run: build/examples/mnist_mlp --data data/mnist --epochs 1
#include "common.h"
#include "models.h"

int main(int argc, char** argv) {
  examples::Args args;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a 784-512-512-10 MLP on MNIST", args, code)) return code;
  return examples::run_main([&] {
    hg::manual_seed(args.seed);
    auto model = examples::mnist_mlp();
    return examples::train_mnist("mlp", *model, args);
  });
}
