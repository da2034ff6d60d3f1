// libFuzzer target: the examples' checkpoint restore (model + SGD + GradScaler) on arbitrary
// bytes, followed by one fp16 training step, as `mnist_mlp --resume FILE` would run.
#include "examples/common.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz_input_file(data, size);
  namespace nn = hg::nn;
  nn::Sequential model{std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(6, 5),
                       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(5, 3)};
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  hg::amp::GradScaler scaler(hg::Device(hg::kCPU), {.enabled = true});
  try {
    const int64_t epoch = examples::load_checkpoint(path, model, opt, scaler);
    if (epoch < 0) __builtin_trap();
    const hg::Tensor x = hg::ones({4, 6});
    const hg::Tensor y = hg::zeros({4}, hg::kInt64);
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::AutocastGuard autocast(hg::kCPU, hg::kFloat16);
      loss = hg::cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  } catch (const hg::Error&) {
  }
  return 0;
}
