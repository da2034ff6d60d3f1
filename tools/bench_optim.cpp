// Optimizer step benchmark (docs/BENCHMARKS.md, "Optimizer step"): the per-parameter kernels
// (one call per parameter, HG_OPTIM_PER_PARAM=1) against the multi-tensor ones (one call per
// group, device and dtype), in the same process, rounds alternating between the two so drift in
// the machine's load hits both. Models: GPT-2 d4's parameter shapes (52 tensors, 16.3M values)
// and a synthetic one of 100 small tensors. Prints the median ms a step of each path.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace {

using hg::Shape;

// GPT-2 d4 (examples/gpt2_model.h: 4 layers, n_embd 256, context 1024, padded vocabulary).
std::vector<Shape> gpt2_d4_shapes() {
  const int64_t c = 256;
  std::vector<Shape> s = {{50304, c}, {1024, c}};
  for (int l = 0; l < 4; ++l) {
    for (const Shape& p :
         std::vector<Shape>{{c}, {c}, {c, 3 * c}, {3 * c}, {c, c}, {c}, {c}, {c}, {c, 4 * c}, {4 * c}, {4 * c, c}, {c}})
      s.push_back(p);
  }
  s.push_back({c});
  s.push_back({c});
  return s;
}

// 100 tensors of 1K to 32K values (1.6M in all): a small model where the per-call cost counts.
std::vector<Shape> synthetic_shapes() {
  std::vector<Shape> s;
  for (int i = 0; i < 100; ++i) s.push_back({1024 * (1 + (i * 7) % 32)});
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

using MakeOpt = std::function<std::unique_ptr<hg::optim::Optimizer>(const hg::TensorList&)>;

void bench(const char* model, const std::vector<Shape>& shapes, const char* opt_name, const MakeOpt& make) {
  hg::manual_seed(1);
  hg::TensorList ps[2];
  std::unique_ptr<hg::optim::Optimizer> opts[2];
  for (int path = 0; path < 2; ++path) {
    for (const Shape& s : shapes) {
      hg::Tensor p = (hg::randn(s) * 0.02).requires_grad_();
      p.set_grad(hg::randn(s) * 0.01);
      ps[path].push_back(p);
    }
    opts[path] = make(ps[path]);
    opts[path]->set_per_param(path == 0);
  }
  constexpr int kRounds = 7, kSteps = 10;
  std::vector<double> ms[2];
  for (int round = 0; round < kRounds; ++round) {
    for (int path = 0; path < 2; ++path) {
      opts[path]->step();  // warm
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kSteps; ++i) opts[path]->step();
      const auto t1 = std::chrono::steady_clock::now();
      ms[path].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / kSteps);
    }
  }
  int64_t values = 0;
  for (const Shape& s : shapes) values += hg::numel_of(s);
  std::printf("%-10s %-6s %3zu tensors %9lld values  per-param %8.3f ms  multi-tensor %8.3f ms  (x%.2f)\n", model,
              opt_name, shapes.size(), static_cast<long long>(values), median(ms[0]), median(ms[1]),
              median(ms[0]) / median(ms[1]));
}

}  // namespace

int main() {
  using namespace hg::optim;
  const MakeOpt adamw = [](const hg::TensorList& p) {
    return std::make_unique<AdamW>(p, AdamWOptions{.lr = 6e-4, .beta2 = 0.95, .weight_decay = 0.1});
  };
  const MakeOpt sgd = [](const hg::TensorList& p) {
    return std::make_unique<SGD>(p, SGDOptions{.lr = 0.01, .momentum = 0.9});
  };
  for (const auto& [name, shapes] : std::vector<std::pair<const char*, std::vector<Shape>>>{
           {"gpt2-d4", gpt2_d4_shapes()}, {"synth-100", synthetic_shapes()}}) {
    bench(name, shapes, "AdamW", adamw);
    bench(name, shapes, "SGD", sgd);
  }
  return 0;
}
