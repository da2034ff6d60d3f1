// The toolbox ops of issue 43 (activations, logsumexp, rms_norm, BatchNorm1d, soft-target
// cross_entropy) on CUDA against the CPU, forward and input gradients, on the same inputs.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_with_grad;
using hg::test::cuda_tolerance;
using hg::test::row_tolerance;
using hg::test::Tolerance;

namespace {
constexpr Dtype kFloats[] = {kFloat32, kFloat16, kBFloat16};
}  // namespace

TEST_CASE("cuda activations (+backward) match the CPU") {
  manual_seed(41);
  for (Dtype d : kFloats) {
    CAPTURE(dtype_name(d));
    const Tensor x = (randn({33, 70}) * 3.0).to(d);
    // The gradients are built from public ops, summed in a different order: row tolerances.
    const auto tol = row_tolerance(d);
    check_with_grad([](const auto& v) { return leaky_relu(v[0], 0.2); }, {x}, tol);
    check_with_grad([](const auto& v) { return elu(v[0], 0.7); }, {x}, tol);
    check_with_grad([](const auto& v) { return selu(v[0]); }, {x}, tol);
    check_with_grad([](const auto& v) { return mish(v[0]); }, {x}, tol);
    check_with_grad([](const auto& v) { return hardswish(v[0]); }, {x}, tol);
    check_with_grad([](const auto& v) { return softplus(v[0], 2.0, 5.0); }, {x}, tol);
  }
}

TEST_CASE("cuda logsumexp (+backward) matches the CPU, adjacent and non-adjacent dims") {
  manual_seed(42);
  for (Dtype d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor x = (randn({6, 37, 5}) * 4.0).to(d);
    check_with_grad([](const auto& v) { return logsumexp(v[0], {1}); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return logsumexp(v[0], {2}, true); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return logsumexp(v[0], {0, 2}); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return logsumexp(v[0], {}); }, {x}, row_tolerance(d));
  }
  // -inf rows, +inf and NaN as on the CPU.
  const Tensor s = tensor(std::vector<float>{-INFINITY, -INFINITY, INFINITY, 1, NAN, 1}, {3, 2});
  hg::test::check_cuda_matches_cpu([](const auto& v) { return logsumexp(v[0], {1}); }, {s}, Tolerance{0, 0});
}

TEST_CASE("cuda rms_norm (+backward) matches the CPU") {
  manual_seed(43);
  for (Dtype d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor x = (randn({7, 300}) * 2.0).to(d), w = randn({300}).to(d);
    check_with_grad([](const auto& v) { return rms_norm(v[0], {300}, v[1], 1e-5); }, {x, w}, row_tolerance(d));
    check_with_grad([](const auto& v) { return rms_norm(v[0], {300}); }, {x}, row_tolerance(d));
    // A float32 weight with 16-bit input, as master weights are kept.
    check_with_grad([](const auto& v) { return rms_norm(v[0], {300}, v[1]); }, {x, w.to(kFloat32)}, row_tolerance(d));
  }
}

TEST_CASE("cuda BatchNorm1d (+backward) matches the CPU on [N, C] and [N, C, L], running stats too") {
  manual_seed(44);
  for (const Shape& shape : {Shape{16, 5}, Shape{4, 5, 9}}) {
    CAPTURE(shape);
    nn::BatchNorm1d cpu(5), gpu(5);
    gpu.to(kCUDA);
    const Tensor x = randn(shape);
    check_close(gpu(x.to(kCUDA)).to(kCPU), cpu(x), row_tolerance(kFloat32));
    check_close(gpu.running_var.to(kCPU), cpu.running_var, row_tolerance(kFloat32));
    cpu.eval(), gpu.eval();
    check_close(gpu(x.to(kCUDA)).to(kCPU), cpu(x), row_tolerance(kFloat32));
  }
}

TEST_CASE("cuda cross_entropy with probability targets and label_smoothing (+backward) matches the CPU") {
  manual_seed(45);
  for (Dtype d : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({8, 10, 3}).to(d), t = softmax(randn({8, 10, 3}), 1).to(d);
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      check_with_grad([r](const auto& v) { return cross_entropy(v[0], v[1], r, -100, 0.1); }, {x, t}, row_tolerance(d));
    }
  }
}
