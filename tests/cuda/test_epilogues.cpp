// GEMM epilogues and fused norms on CUDA (issue 41 item 5) against the CPU: linear's bias
// gradient through the BGRADB epilogue (no separate sum), linear_gelu_linear through GELU_AUX_BIAS
// and DGELU_BGRAD, add_layer_norm in and out of a bfloat16 region.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;

namespace {

// The tensors' values on the CPU (float32), for comparing runs on two devices.
std::vector<Tensor> on_cpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? t.to(kCPU).to(kFloat32) : t);
  return out;
}

// Each result against the CPU's, relative to the largest value of the CPU's result.
void check_results_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    const double largest = want[i].abs().max().item<double>();
    check_close(got[i], want[i], {rel * largest, rel});
  }
}

}  // namespace

TEST_CASE("cuda linear's weight and bias gradients come from one GEMM (BGRADB) and match the CPU") {
  for (const Dtype dt : {kFloat32, kBFloat16}) {
    CAPTURE(dt);
    manual_seed(41);
    const Tensor x0 = randn({64, 48}), w0 = randn({40, 48}) * 0.2, b0 = randn({40});
    auto run = [&](Device dev) {
      Tensor x = x0.to(dt).to(dev).requires_grad_(), w = w0.to(dt).to(dev).requires_grad_();
      Tensor b = b0.to(dt).to(dev).requires_grad_();
      const Tensor y = linear(x, w, b);
      OpRecorder rec;
      (y.to(kFloat32) * y.to(kFloat32)).sum().backward();
      if (dev.is_cuda()) CHECK(rec.count("sum", true) == 0u);  // the bias gradient rode on the GEMM
      return on_cpu({x.grad(), w.grad(), b.grad()});
    };
    check_results_close(run(kCUDA), run(kCPU), dt == kFloat32 ? 1e-4 : 2e-2);
  }
}

TEST_CASE("cuda linear_gelu_linear (GELU_AUX_BIAS forward, DGELU_BGRAD backward) matches the CPU and the composition") {
  // hidden 64: the epilogue path; hidden 36 (not a multiple of 8): linear's and gelu's kernels.
  for (const int64_t hidden : {int64_t{64}, int64_t{36}}) {
    for (const Dtype dt : {kFloat32, kBFloat16}) {
      CAPTURE(hidden);
      CAPTURE(dt);
      manual_seed(42);
      const Tensor x0 = randn({2, 16, 32}), w10 = randn({hidden, 32}) * 0.2, b10 = randn({hidden}),
                   w20 = randn({24, hidden}) * 0.2, b20 = randn({24});
      auto run = [&](Device dev, bool fused) {
        Tensor x = x0.to(dt).to(dev).requires_grad_(), w1 = w10.to(dt).to(dev).requires_grad_(),
               b1 = b10.to(dt).to(dev).requires_grad_(), w2 = w20.to(dt).to(dev).requires_grad_(),
               b2 = b20.to(dt).to(dev).requires_grad_();
        const Tensor y = fused ? linear_gelu_linear(x, w1, b1, w2, b2) : linear(gelu(linear(x, w1, b1), true), w2, b2);
        (y.to(kFloat32) * y.to(kFloat32)).sum().backward();
        return on_cpu({y, x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()});
      };
      const double rel = dt == kFloat32 ? 1e-4 : 3e-2;
      const auto cuda_fused = run(kCUDA, true);
      check_results_close(cuda_fused, run(kCPU, true), rel);
      check_results_close(cuda_fused, run(kCUDA, false), rel);
    }
  }
}

TEST_CASE("cuda add_layer_norm matches the CPU, and writes bfloat16 inside a cuda bfloat16 region") {
  manual_seed(43);
  const Tensor x0 = randn({8, 768}), r0 = randn({8, 768}) * 3.0, w0 = randn({768}), b0 = randn({768});
  auto run = [&](Device dev, bool region) {
    Tensor x = x0.to(dev).requires_grad_(), r = r0.to(dev).requires_grad_(), w = w0.to(dev).requires_grad_(),
           b = b0.to(dev).requires_grad_();
    amp::AutocastGuard guard(dev.type, kBFloat16, region);
    const AddLayerNorm res = add_layer_norm(x, r, {768}, w, b);
    CHECK(res.normalized.dtype() == (region ? kBFloat16 : kFloat32));
    (res.sum.sum() + (res.normalized.to(kFloat32) * res.normalized.to(kFloat32)).sum()).backward();
    return on_cpu({res.sum, res.normalized, x.grad(), r.grad(), w.grad(), b.grad()});
  };
  check_results_close(run(kCUDA, false), run(kCPU, false), 1e-4);
  check_results_close(run(kCUDA, true), run(kCPU, true), 2e-2);
  // A bfloat16 branch output into a float32 residual stream (GPT-2 under autocast): the one-pass
  // kernel's mixed input.
  auto mixed = [&](Device dev) {
    Tensor x = x0.to(kBFloat16).to(dev).requires_grad_(), r = r0.to(dev).requires_grad_();
    amp::AutocastGuard guard(dev.type, kBFloat16);
    const AddLayerNorm res = add_layer_norm(x, r, {768}, w0.to(dev), b0.to(dev));
    CHECK(res.sum.dtype() == kFloat32);
    (res.sum.sum() + res.normalized.to(kFloat32).sum()).backward();
    return on_cpu({res.sum, res.normalized, x.grad(), r.grad()});
  };
  check_results_close(mixed(kCUDA), mixed(kCPU), 2e-2);
}
