// Fits y = 3x - 2 + noise with one Linear(1, 1) and SGD, optionally under mixed precision
// (--amp bf16 or fp16, with a GradScaler); prints the learned weight and bias.
// Run: build/examples/linear_regression
#include "common.h"

int main(int argc, char** argv) {
  int64_t epochs = 200;
  double lr = 0.1;
  uint64_t seed = 0;
  std::string amp = "off";
  CLI::App app{"Fit y = 3x - 2 + noise with a linear model"};
  app.add_option("--epochs", epochs, "full-batch steps")
      ->capture_default_str()
      ->check(examples::whole_number(1, examples::kMaxEpochs));
  app.add_option("--lr", lr, "learning rate")->capture_default_str()->check(examples::real_number(0, examples::kMaxLr));
  app.add_option("--seed", seed, "random seed")
      ->capture_default_str()
      ->check(examples::whole_number(0, examples::kMaxSeed));
  app.add_option("--amp", amp, "mixed precision: off, bf16, or fp16 (with loss scaling)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  int code = 0;
  if (!examples::parse_cli(app, argc, argv, code)) return code;
  try {
    hg::manual_seed(seed);
    const hg::Tensor x = hg::rand({256, 1}) * 2.0 - 1.0;
    const hg::Tensor y = x * 3.0 - 2.0 + hg::randn({256, 1}) * 0.1;
    hg::nn::Linear model(1, 1);
    hg::optim::SGD opt(model.parameters(), {.lr = lr});
    // Autocast runs the linear layer in the --amp dtype; fp16 also needs loss scaling. With
    // --amp off the guard and the scaler are disabled and change nothing.
    const std::optional<hg::Dtype> amp_dtype = amp == "bf16"   ? std::optional(hg::kBFloat16)
                                               : amp == "fp16" ? std::optional(hg::kFloat16)
                                                               : std::nullopt;
    hg::amp::GradScaler scaler(hg::kCPU, {.enabled = amp == "fp16"});
    double loss_value = 0;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      opt.zero_grad();
      hg::Tensor loss;
      {
        hg::amp::AutocastGuard autocast(hg::kCPU, amp_dtype, amp_dtype.has_value());
        const hg::Tensor diff = model(x).to(hg::kFloat32) - y;  // the loss in float32
        loss = (diff * diff).mean();
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      loss_value = loss.item<double>();
      if ((epoch + 1) % 50 == 0) fmt::print("epoch {} loss {:.5f}\n", epoch + 1, loss_value);
    }
    const double w = model.weight.item<double>(), b = model.bias.item<double>();
    fmt::print("learned y = {:.4f} x {} {:.4f} (true: 3x - 2)\n", w, b < 0 ? "-" : "+", std::abs(b));
    fmt::print(
        R"({{"model":"linear_regression","device":"cpu","amp":"{}","epochs":{},"weight":{},"bias":{},"final_loss":{}}})"
        "\n",
        amp, epochs, examples::json_number(w, 4), examples::json_number(b, 4), examples::json_number(loss_value, 5));
    return 0;
  } catch (const hg::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
