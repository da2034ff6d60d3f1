// Fits y = 3x - 2 + noise with one Linear(1, 1) and SGD; prints the learned weight and bias.
// Run: build/examples/linear_regression
#include "common.h"

int main(int argc, char** argv) {
  int64_t epochs = 200;
  double lr = 0.1;
  uint64_t seed = 0;
  CLI::App app{"Fit y = 3x - 2 + noise with a linear model"};
  app.add_option("--epochs", epochs, "full-batch steps")
      ->capture_default_str()
      ->check(examples::whole_number(1, examples::kMaxEpochs));
  app.add_option("--lr", lr, "learning rate")->capture_default_str()->check(examples::real_number(0, examples::kMaxLr));
  app.add_option("--seed", seed, "random seed")
      ->capture_default_str()
      ->check(examples::whole_number(0, examples::kMaxSeed));
  int code = 0;
  if (!examples::parse_cli(app, argc, argv, code)) return code;
  try {
    hg::manual_seed(seed);
    const hg::Tensor x = hg::rand({256, 1}) * 2.0 - 1.0;
    const hg::Tensor y = x * 3.0 - 2.0 + hg::randn({256, 1}) * 0.1;
    hg::nn::Linear model(1, 1);
    hg::optim::SGD opt(model.parameters(), {.lr = lr});
    double loss_value = 0;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      opt.zero_grad();
      const hg::Tensor diff = model(x) - y;
      const hg::Tensor loss = (diff * diff).mean();
      loss.backward();
      opt.step();
      loss_value = loss.item<double>();
      if ((epoch + 1) % 50 == 0) fmt::print("epoch {} loss {:.5f}\n", epoch + 1, loss_value);
    }
    const double w = model.weight.item<double>(), b = model.bias.item<double>();
    fmt::print("learned y = {:.4f} x {} {:.4f} (true: 3x - 2)\n", w, b < 0 ? "-" : "+", std::abs(b));
    fmt::print(R"({{"model":"linear_regression","device":"cpu","epochs":{},"weight":{},"bias":{},"final_loss":{}}})"
               "\n",
               epochs, examples::json_number(w, 4), examples::json_number(b, 4), examples::json_number(loss_value, 5));
    return 0;
  } catch (const hg::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
