// Elementwise benchmark (docs/history/PERF.md, "Elementwise ops"): reads lines "op dtype n reps" on
// stdin and answers each with the median time in ms of `reps` out-of-place calls on n elements.
// tools/bench_elementwise_torch.py drives it next to PyTorch, op by op; the thread count comes
// from HG_NUM_THREADS, so the driver keeps one process per thread count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace {

using Fn = std::function<hg::Tensor(const hg::Tensor&, const hg::Tensor&)>;

// The same inputs as the PyTorch side: randn * 2, made positive for the ops defined on x > 0.
const std::map<std::string, std::pair<Fn, bool>>& ops() {
  using T = const hg::Tensor&;
  static const std::map<std::string, std::pair<Fn, bool>> m = {
      {"neg", {[](T x, T) { return hg::neg(x); }, false}},
      {"abs", {[](T x, T) { return hg::abs(x); }, false}},
      {"relu", {[](T x, T) { return hg::relu(x); }, false}},
      {"reciprocal", {[](T x, T) { return hg::reciprocal(x); }, true}},
      {"sqrt", {[](T x, T) { return hg::sqrt(x); }, true}},
      {"rsqrt", {[](T x, T) { return hg::rsqrt(x); }, true}},
      {"exp", {[](T x, T) { return hg::exp(x); }, false}},
      {"log", {[](T x, T) { return hg::log(x); }, true}},
      {"log1p", {[](T x, T) { return hg::log1p(x); }, true}},
      {"sigmoid", {[](T x, T) { return hg::sigmoid(x); }, false}},
      {"tanh", {[](T x, T) { return hg::tanh(x); }, false}},
      {"erf", {[](T x, T) { return hg::erf(x); }, false}},
      {"gelu", {[](T x, T) { return hg::gelu(x); }, false}},
      {"gelu_tanh", {[](T x, T) { return hg::gelu(x, true); }, false}},
      {"softplus", {[](T x, T) { return hg::softplus(x); }, false}},
      {"pow_2.5", {[](T x, T) { return hg::pow(x, 2.5); }, true}},
      {"add", {[](T x, T y) { return hg::add(x, y); }, false}},
      {"sub", {[](T x, T y) { return hg::sub(x, y); }, false}},
      {"mul", {[](T x, T y) { return hg::mul(x, y); }, false}},
      {"div", {[](T x, T y) { return hg::div(x, y); }, false}},
      {"maximum", {[](T x, T y) { return hg::maximum(x, y); }, false}},
      {"minimum", {[](T x, T y) { return hg::minimum(x, y); }, false}},
      {"eq", {[](T x, T y) { return hg::eq(x, y); }, false}},
      {"ne", {[](T x, T y) { return hg::ne(x, y); }, false}},
      {"lt", {[](T x, T y) { return hg::lt(x, y); }, false}},
      {"le", {[](T x, T y) { return hg::le(x, y); }, false}},
      {"gt", {[](T x, T y) { return hg::gt(x, y); }, false}},
      {"ge", {[](T x, T y) { return hg::ge(x, y); }, false}},
  };
  return m;
}

double median_ms(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  f();  // warm-up
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  hg::manual_seed(0);
  std::string op, dtype;
  int64_t n = 0;
  int reps = 0;
  while (std::cin >> op >> dtype >> n >> reps) {
    const auto it = ops().find(op);
    if (it == ops().end() || (dtype != "float32" && dtype != "bfloat16")) {
      std::printf("error unknown op or dtype: %s %s\n", op.c_str(), dtype.c_str());
      std::fflush(stdout);
      continue;
    }
    const hg::Dtype d = dtype == "float32" ? hg::kFloat32 : hg::kBFloat16;
    hg::Tensor x = hg::randn({n}) * 2.0, y = hg::randn({n}) * 2.0;
    if (it->second.second) x = x.abs() + 0.1;
    x = x.to(d);
    y = y.to(d);
    const Fn& f = it->second.first;
    std::printf("%.4f\n", median_ms(reps, [&] { f(x, y); }));
    std::fflush(stdout);
  }
}
