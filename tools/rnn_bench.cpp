// rnn_bench: nn::LSTM (or GRU, RNN) forward and forward+backward timed on the CPU, fp32 or under
// bfloat16 autocast; tools/rnn_bench_torch.py times PyTorch's module on the same sizes and
// tools/rnn_bench.sh runs both side by side (docs/BENCHMARKS.md, "LSTM"). Threads: HG_NUM_THREADS.
//   build/tools/rnn_bench --module lstm --seq 64 --batch 32 --input 128 --hidden 256 --layers 2 --amp bf16
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace {
double median_ms(int warmup, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nn::LSTM/GRU/RNN forward and forward+backward on the CPU"};
  std::string module = "lstm", amp = "off";
  int64_t seq = 64, batch = 32, input = 128, hidden = 256, layers = 2;
  int warmup = 3, iters = 10;
  app.add_option("--module", module)->check(CLI::IsMember({"lstm", "gru", "rnn"}));
  app.add_option("--amp", amp)->check(CLI::IsMember({"off", "bf16"}));
  app.add_option("--seq", seq);
  app.add_option("--batch", batch);
  app.add_option("--input", input);
  app.add_option("--hidden", hidden);
  app.add_option("--layers", layers);
  app.add_option("--warmup", warmup);
  app.add_option("--iters", iters);
  CLI11_PARSE(app, argc, argv);
  const char* env = std::getenv("HG_NUM_THREADS");
  const std::string threads = env ? env : "all";

  hg::manual_seed(0);
  std::shared_ptr<hg::nn::Module> m;
  std::function<hg::Tensor(const hg::Tensor&)> run;
  if (module == "lstm") {
    auto l = std::make_shared<hg::nn::LSTM>(input, hidden, hg::nn::LSTMOptions{.num_layers = layers});
    run = [l](const hg::Tensor& x) { return (*l)(x).output; };
    m = l;
  } else if (module == "gru") {
    auto l = std::make_shared<hg::nn::GRU>(input, hidden, hg::nn::GRUOptions{.num_layers = layers});
    run = [l](const hg::Tensor& x) { return (*l)(x).output; };
    m = l;
  } else {
    auto l = std::make_shared<hg::nn::RNN>(input, hidden, hg::nn::RNNOptions{.num_layers = layers});
    run = [l](const hg::Tensor& x) { return (*l)(x).output; };
    m = l;
  }
  const hg::Tensor x = hg::randn({seq, batch, input});
  auto forward = [&] {
    std::optional<hg::amp::AutocastGuard> guard;
    if (amp == "bf16") guard.emplace(hg::kCPU, hg::kBFloat16);
    return run(x).to(hg::kFloat32).sum();
  };
  const double fwd = median_ms(warmup, iters, [&] {
    hg::NoGradGuard no_grad;
    forward();
  });
  const double fwd_bwd = median_ms(warmup, iters, [&] {
    m->zero_grad();
    forward().backward();
  });
  fmt::print(R"({{"impl": "halfgrad", "module": "{}", "amp": "{}", "threads": "{}", "forward_ms": {:.2f}, )"
             R"("forward_backward_ms": {:.2f}}})"
             "\n",
             module, amp, threads, fwd, fwd_bwd);
}
