// The kernel microbenchmarks (formerly tools/bench_core and tools/bench_conv).
#include "kernels.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace amp_bench {
namespace {

using clock = std::chrono::steady_clock;

double ms_since(clock::time_point t0) { return std::chrono::duration<double, std::milli>(clock::now() - t0).count(); }

// Median of `steps` timings of f() after `warmup` untimed calls.
template <class F>
double median_ms(const Options& o, F&& f) {
  for (int64_t i = 0; i < o.warmup; ++i) f();
  std::vector<double> t;
  for (int64_t i = 0; i < o.steps; ++i) {
    const auto t0 = clock::now();
    f();
    t.push_back(ms_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void gemm(std::FILE* out, const Options& o) {
  const int64_t n = o.gemm_size;
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const hg::Tensor a = hg::randn({n, n}), b = hg::randn({n, n});
  std::vector<float> c(static_cast<size_t>(n * n));
  const double blas_ms = median_ms(o, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(n), 1.0f, a.data_ptr<float>(), static_cast<int>(n), b.data_ptr<float>(),
                static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
  });
  for (hg::Dtype d : {hg::kFloat32, hg::kBFloat16}) {
    const hg::Tensor ad = a.to(d), bd = b.to(d);
    const double ms = median_ms(o, [&] { hg::mm(ad, bd); });
    fmt::print(out, "gemm {}x{}x{} {:8s}: halfgrad {:8.2f} ms ({:.1f} GFLOP/s)", n, n, n, hg::dtype_name(d), ms,
               flops / ms / 1e6);
    if (d == hg::kFloat32)
      fmt::print(out, ", OpenBLAS sgemm {:8.2f} ms ({:.1f} GFLOP/s)", blas_ms, flops / blas_ms / 1e6);
    fmt::print(out, "\n");
  }
}

// The MNIST CNN's conv1 (1->32) and conv2 (32->64), 3x3 on 28x28, forward + backward.
void conv(std::FILE* out, const Options& o) {
  const int64_t n = o.batch;
  // Backward is twice the forward for conv2 (data and filter), once for conv1 (filter only).
  const double f1 = 2.0 * n * 32 * 26 * 26 * 9, f2 = 2.0 * n * 64 * 24 * 24 * 32 * 9;
  const double flops = 2 * f1 + 3 * f2;
  for (hg::Dtype d : {hg::kFloat32, hg::kBFloat16, hg::kFloat16}) {
    const hg::Tensor x = hg::randn({n, 1, 28, 28}).to(d);
    hg::Tensor w1 = (hg::randn({32, 1, 3, 3}) * 0.3).to(d).requires_grad_();
    hg::Tensor b1 = hg::zeros({32}, d).requires_grad_();
    hg::Tensor w2 = (hg::randn({64, 32, 3, 3}) * 0.06).to(d).requires_grad_();
    hg::Tensor b2 = hg::zeros({64}, d).requires_grad_();
    const hg::Tensor g = hg::randn({n, 64, 24, 24}).to(d);
    std::vector<double> fwd;
    const double ms = median_ms(o, [&] {
      const auto t0 = clock::now();
      hg::Tensor y = hg::conv2d(hg::conv2d(x, w1, b1).relu(), w2, b2);
      fwd.push_back(ms_since(t0));
      y.backward(g);
      for (hg::Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(hg::Tensor());
    });
    fwd.erase(fwd.begin(), fwd.begin() + o.warmup);
    std::sort(fwd.begin(), fwd.end());
    fmt::print(out, "conv1+conv2 {:8s} batch {}: forward {:7.2f} ms, forward+backward {:7.2f} ms ({:.1f} GFLOP/s)\n",
               hg::dtype_name(d), n, fwd[fwd.size() / 2], ms, flops / (ms * 1e6));
  }
}

// One fused SGD step (momentum 0.9) on four n x n float32 weights (wide_mlp's at n = 4096): with
// no 16-bit copy to write, and with the bf16 or fp16 copy a step writes for weights that an
// autocast region used (docs/AMP.md section 3, warm casts).
void optimizer_step(std::FILE* out, const Options& o) {
  const int64_t n = o.optim_size;
  for (const std::optional<hg::Dtype> copy :
       {std::optional<hg::Dtype>(), std::optional(hg::kBFloat16), std::optional(hg::kFloat16)}) {
    hg::TensorList weights;
    for (int i = 0; i < 4; ++i) weights.push_back((hg::randn({n, n}) * 0.01).requires_grad_());
    hg::optim::SGD opt(weights, {.lr = 0.01, .momentum = 0.9});
    for (const hg::Tensor& w : weights) {  // a gradient, and under autocast the weight marked for a warm copy
      hg::amp::AutocastGuard autocast(hg::kCPU, copy, copy.has_value());
      hg::mm(hg::ones({1, n}), w).to(hg::kFloat32).sum().backward();
    }
    const double ms = median_ms(o, [&] { opt.step(); });
    // Read param, grad, momentum; write param, momentum (+ the copy).
    const double bytes = 4.0 * static_cast<double>(n * n) * (20.0 + (copy ? 2.0 : 0.0));
    fmt::print(out, "optimizer SGD step, 4 x {}x{} float32 weights, {:14s}: {:7.2f} ms ({:.1f} GB/s moved)\n", n, n,
               copy ? fmt::format("{} copy", hg::dtype_name(*copy)) : std::string("no copy"), ms, bytes / ms / 1e6);
  }
}

}  // namespace

int run_kernels(std::FILE* out, const Options& options) {
  hg::manual_seed(options.seed);
  gemm(out, options);
  conv(out, options);
  optimizer_step(out, options);
  return 0;
}

}  // namespace amp_bench
