// Prints every benchmark model's named parameter shapes ("model name 512x784"), in amp_bench's
// model order, for tools/mnist_models.py --check (the PyTorch twins' definitions).
#include <fmt/format.h>

#include "models.h"

int main() {
  for (const char* name : {"linear", "mnist_mlp", "mnist_cnn", "wide_mlp"}) {
    const auto model = amp_bench::build_model(name, 0);
    for (const auto& [param, t] : model->named_parameters())
      fmt::print("{} {} {}\n", name, param, fmt::join(t.shape(), "x"));
  }
}
