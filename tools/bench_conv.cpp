// Times forward + backward of the MNIST CNN's two conv layers (1->32 and 32->64, 3x3, 28x28,
// batch 128) in float32, bfloat16 and float16, and prints the median step in ms and GFLOP/s.
// Usage: bench_conv [iterations]   (a fuller benchmark may replace it: tools/ issue 6)
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include <halfgrad.h>

namespace {

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  const int64_t n = 128;
  // Forward FLOPs of both layers; backward is twice that for conv2 (data and filter) and once
  // for conv1 (filter only: the image needs no gradient).
  const double f1 = 2.0 * n * 32 * 26 * 26 * 9, f2 = 2.0 * n * 64 * 24 * 24 * 32 * 9;
  const double flops = 2 * f1 + 3 * f2;
  hg::manual_seed(0);
  for (hg::Dtype d : {hg::kFloat32, hg::kBFloat16, hg::kFloat16}) {
    const hg::Tensor x = hg::randn({n, 1, 28, 28}).to(d);
    hg::Tensor w1 = (hg::randn({32, 1, 3, 3}) * 0.3).to(d).requires_grad_();
    hg::Tensor b1 = hg::zeros({32}, d).requires_grad_();
    hg::Tensor w2 = (hg::randn({64, 32, 3, 3}) * 0.06).to(d).requires_grad_();
    hg::Tensor b2 = hg::zeros({64}, d).requires_grad_();
    const hg::Tensor g = hg::randn({n, 64, 24, 24}).to(d);
    std::vector<double> fwd, total;
    for (int i = 0; i < iters + 2; ++i) {  // two warm-up steps
      const auto t0 = std::chrono::steady_clock::now();
      hg::Tensor y = hg::conv2d(hg::conv2d(x, w1, b1).relu(), w2, b2);
      const auto t1 = std::chrono::steady_clock::now();
      y.backward(g);
      const auto t2 = std::chrono::steady_clock::now();
      if (i >= 2) {
        fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        total.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      }
      for (hg::Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(hg::Tensor());
    }
    const double ms = median_ms(total);
    fmt::print("conv1+conv2 {:9s} batch {}: forward {:7.2f} ms, forward+backward {:7.2f} ms ({:.1f} GFLOP/s)\n",
               hg::dtype_name(d), n, median_ms(fwd), ms, flops / (ms * 1e6));
  }
  return 0;
}
