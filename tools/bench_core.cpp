// First performance figures (docs/PERF.md): a 1024^3 float32 matmul through hg::mm against a
// direct cblas_sgemm call, and a 784-512-512-10 MLP forward+backward step at batch 128.
#include <cblas.h>

#include <cmath>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <halfgrad.h>

namespace {
template <class F>
double median_ms(int reps, F&& f) {
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
  const int64_t n = 1024;
  hg::Tensor a = hg::randn({n, n}), b = hg::randn({n, n});
  const double flops = 2.0 * n * n * n;
  const double hg_ms = median_ms(20, [&] { hg::mm(a, b); });
  std::vector<float> c(static_cast<size_t>(n * n));
  const double blas_ms = median_ms(20, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(),
                n, 0.0f, c.data(), n);
  });
  std::printf("matmul 1024x1024x1024 float32: halfgrad %.1f GFLOP/s (%.2f ms), OpenBLAS sgemm %.1f GFLOP/s (%.2f ms)\n",
              flops / hg_ms / 1e6, hg_ms, flops / blas_ms / 1e6, blas_ms);

  for (hg::Dtype dt : {hg::kFloat32, hg::kBFloat16}) {
    const int64_t batch = 128;
    std::vector<hg::Tensor> params;
    auto layer = [&](int64_t in, int64_t out) {
      params.push_back((hg::rand({out, in}) * 2.0 - 1.0).mul_(1.0 / std::sqrt(in)).requires_grad_());
      params.push_back(hg::zeros({out}).requires_grad_());
    };
    layer(784, 512);
    layer(512, 512);
    layer(512, 10);
    hg::Tensor x = hg::randn({batch, 784}).to(dt), target = hg::randn({batch, 10});
    const double ms = median_ms(50, [&] {
      hg::Tensor h = x;
      for (size_t i = 0; i < params.size(); i += 2) {
        h = hg::linear(h, params[i].to(dt), params[i + 1].to(dt));
        if (i + 2 < params.size()) h = h.relu();
      }
      hg::Tensor d = h.to(hg::kFloat32) - target;
      (d * d).mean().backward();
      for (auto& p : params) p.set_grad(hg::Tensor());
    });
    std::printf("MLP 784-512-512-10 batch 128 forward+backward (%s weights cast per step): %.2f ms\n",
                std::string(hg::dtype_name(dt)).c_str(), ms);
  }
  return 0;
}
