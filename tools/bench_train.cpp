// Times full MNIST training steps on the CPU (forward, cross_entropy, backward, SGD momentum
// step) for the MLP and CNN in float32 and bf16 autocast: median step in ms, and how many times
// the caching allocator asked the system for memory during the timed steps (should be 0).
// Usage: bench_train [steps [mlp|cnn [fp32|bf16]]]; tools/bench_train_torch.py is its PyTorch twin.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace {

namespace nn = hg::nn;

// CPU time of the whole process (all threads), in ms: on a shared machine it moves less with
// other people's load than wall time does.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

std::unique_ptr<nn::Sequential> make_model(const std::string& name) {
  if (name == "mlp")
    return std::unique_ptr<nn::Sequential>(new nn::Sequential{
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(512, 10)});
  return std::unique_ptr<nn::Sequential>(new nn::Sequential{
      std::make_shared<nn::Conv2d>(1, 32, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::Conv2d>(32, 64, 3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(9216, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

void run(const std::string& model_name, bool bf16, int steps) {
  hg::manual_seed(0);
  auto model = make_model(model_name);
  hg::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  const hg::Tensor x = hg::randn({128, 1, 28, 28});
  const hg::Tensor y = hg::randint(0, 10, {128});
  std::vector<double> ms, cpu;
  int64_t system_allocs = 0;
  double loss = 0;
  const int warmup = 3;
  for (int i = 0; i < warmup + steps; ++i) {
    if (i == warmup) system_allocs = hg::cpu_memory_stats().system_allocations;
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_ms();
    opt.zero_grad();
    hg::Tensor out;
    {
      hg::amp::AutocastGuard autocast(hg::kCPU, hg::kBFloat16, bf16);
      out = hg::cross_entropy((*model)(x), y);
    }
    out.backward();
    opt.step();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      cpu.push_back(cpu_ms() - c0);
    }
    loss = out.item<double>();
  }
  system_allocs = hg::cpu_memory_stats().system_allocations - system_allocs;
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  fmt::print(
      "halfgrad {} {} batch 128: step median {:.2f} ms (p10 {:.2f}, p90 {:.2f}), cpu {:.2f} ms, loss {:.4f}, "
      "system allocations in {} steps: {}\n",
      model_name, bf16 ? "bf16" : "fp32", ms[ms.size() / 2], ms[ms.size() / 10], ms[ms.size() * 9 / 10],
      cpu[cpu.size() / 2], loss, steps, system_allocs);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(10, std::atoi(argv[1])) : 50;
  for (std::string m : {"mlp", "cnn"}) {
    if (argc > 2 && m != argv[2]) continue;
    for (std::string p : {"fp32", "bf16"}) {
      if (argc > 3 && p != argv[3]) continue;
      run(m, p == "bf16", m == "cnn" ? std::max(10, steps / 5) : steps);
    }
  }
  return 0;
}
