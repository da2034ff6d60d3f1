// Reductions and GEMM on CUDA against the CPU kernels on the same inputs.
#include "framework/ops/reduce_kernels.h"
#include "helpers.h"

#ifdef HG_WITH_CUDA
#include "kernels/cuda/blas/lt_matmul.h"
#endif

using namespace hg;
using hg::test::check_close;
using hg::test::check_cuda_matches_cpu;
using hg::test::cuda_tolerance;
using hg::test::Tolerance;

namespace {
using Inputs = std::vector<Tensor>;

// Sums: the CUDA tree order differs from the CPU's 8-lane order; the result is rounded once.
Tolerance sum_tolerance(Dtype d, int64_t n) {
  const double scale = std::sqrt(static_cast<double>(n));
  switch (d) {
    case kFloat32: return {2e-6 * scale, 2e-5};
    case kFloat16: return {1e-3 * scale, 2e-3};
    case kBFloat16: return {8e-3 * scale, 1.6e-2};
    default: return {1e-12 * scale, 1e-12};
  }
}

// The reduce kernel itself on one device: [outer, inner] -> [outer].
Tensor run_reduce(ReduceOp op, const Tensor& in) {
  const bool index = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  Tensor out = empty({in.shape()[0]}, TensorOptions(index ? kInt64 : in.dtype()).device(in.device()));
  reduce_stub(in.device().type, op, out, in);
  return out;
}
}  // namespace

TEST_CASE("sum matches the CPU for short rows, long rows and every layout") {
  manual_seed(10);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    for (Shape s : {Shape{33, 7}, Shape{5, 3001}, Shape{16, 1024}, Shape{1, 1}, Shape{4, 0}}) {
      CAPTURE(s);
      const Tensor x = randn(s, d);
      const Tolerance tol = sum_tolerance(d, s[1]);
      check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], {1}); }, {x}, tol);
      check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], {0}, true); }, {x}, sum_tolerance(d, s[0]));
      check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0]); }, {x}, sum_tolerance(d, x.numel()));
    }
    // float32 accumulation of 16-bit inputs, result in float32.
    const Tensor big = randn({3, 4096}, d);
    check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], {1}, false, kFloat32); }, {big},
                           sum_tolerance(kFloat32, 4096));
  }
  const Tensor i = (randn({6, 300}, kFloat64) * 100.0).to(kInt64);
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], {1}); }, {i}, Tolerance{0, 0});
}

TEST_CASE("max, min, argmax and argmin match the CPU, first extreme and NaN included") {
  manual_seed(11);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kUInt8}) {
    CAPTURE(dtype_name(d));
    for (Shape s : {Shape{41, 10}, Shape{3, 5000}}) {
      CAPTURE(s);
      // Few distinct values, so ties are common and "first index wins" is exercised.
      const Tensor x = (rand(s, kFloat64) * 6.0).to(kInt64).to(d);
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin}) {
        CAPTURE(static_cast<int>(op));
        check_cuda_matches_cpu([op](const Inputs& in) { return run_reduce(op, in[0]); }, {x}, Tolerance{0, 0});
      }
    }
  }
  const double nan = std::nan("");
  const Tensor with_nan = tensor(std::vector<double>{1, nan, 5, nan, 2, 7, 7, 0}, {2, 4}).to(kFloat32);
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin}) {
    check_cuda_matches_cpu([op](const Inputs& in) { return run_reduce(op, in[0]); }, {with_nan}, Tolerance{0, 0});
  }
}

namespace {
Tolerance gemm_tolerance(Dtype d, int64_t k) {
  const double scale = std::sqrt(static_cast<double>(k));
  switch (d) {
    case kFloat32: return {1e-5 * scale, 1e-4};
    case kFloat16: return {1e-3 * scale, 2e-3};
    case kBFloat16: return {8e-3 * scale, 1.6e-2};
    default: return {1e-12 * scale, 1e-12};
  }
}
}  // namespace

TEST_CASE("mm, bmm and matmul match the CPU with transposed, strided and batched operands") {
  manual_seed(12);
  set_allow_tf32(false);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    for (const auto& [m, k, n] :
         std::vector<std::array<int64_t, 3>>{{13, 17, 9}, {128, 64, 96}, {1, 300, 1}, {64, 1, 8}}) {
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      const Tensor a = randn({m, k}, d), b = randn({k, n}, d);
      const Tolerance tol = gemm_tolerance(d, k);
      auto mm2 = [](const Inputs& in) { return mm(in[0], in[1]); };
      check_cuda_matches_cpu(mm2, {a, b}, tol);
      // Column-major operands made on the device (to() would copy them back to row-major), so
      // cuBLASLt reads them in place with CUBLAS_OP_T.
      auto col = [](const Tensor& t) { return t.t().contiguous().t(); };
      check_cuda_matches_cpu([col](const Inputs& in) { return mm(col(in[0]), in[1]); }, {a, b}, tol);
      check_cuda_matches_cpu([col](const Inputs& in) { return mm(in[0], col(in[1])); }, {a, b}, tol);
      check_cuda_matches_cpu([col](const Inputs& in) { return mm(col(in[0]), col(in[1])); }, {a, b}, tol);
      check_cuda_matches_cpu([](const Inputs& in) { return mm(in[1].t(), in[0].t()); }, {a, b}, tol);  // views
    }
    // Operands cuBLASLt cannot read in place (no unit stride): copied first.
    const Tensor wide = randn({20, 34}, d);
    check_cuda_matches_cpu([](const Inputs& in) { return mm(in[0].slice(1, 0, 34, 2), in[0].slice(1, 0, 34, 2).t()); },
                           {wide}, gemm_tolerance(d, 17));
    // (both operands above have no unit stride: [20, 17] with strides (34, 2) and its transpose)
    // Batched, with a transposed batch operand, and batch broadcasting in matmul.
    const Tensor x = randn({3, 8, 16}, d), y = randn({3, 16, 5}, d), w = randn({16, 5}, d);
    check_cuda_matches_cpu([](const Inputs& in) { return bmm(in[0], in[1]); }, {x, y}, gemm_tolerance(d, 16));
    check_cuda_matches_cpu(
        [](const Inputs& in) { return bmm(in[0], in[1].transpose(1, 2).contiguous().transpose(1, 2)); }, {x, y},
        gemm_tolerance(d, 16));
    check_cuda_matches_cpu([](const Inputs& in) { return matmul(in[0], in[1]); }, {x, w}, gemm_tolerance(d, 16));
    // k == 0 gives zeros.
    check_cuda_matches_cpu([](const Inputs& in) { return mm(in[0], in[1]); }, {randn({4, 0}, d), randn({0, 3}, d)},
                           Tolerance{0, 0});
  }
}

TEST_CASE("float32 matmul uses TF32 only when allowed") {
  manual_seed(13);
  const Tensor a = randn({256, 512}), b = randn({512, 128});
  const Tensor ref = mm(a.to(kFloat64), b.to(kFloat64));
  set_allow_tf32(true);
  const Tensor fast = mm(a.to(kCUDA), b.to(kCUDA));
  set_allow_tf32(false);
  const Tensor exact = mm(a.to(kCUDA), b.to(kCUDA));
  check_close(exact, ref.to(kFloat32), Tolerance{1e-4, 1e-4});
  // TF32 rounds inputs to 10 mantissa bits: close, but within ~1e-2 relative, not 1e-4.
  check_close(fast, ref.to(kFloat32), Tolerance{5e-2, 1e-2});
  CHECK_FALSE(allow_tf32());
}

#ifdef HG_WITH_CUDA
TEST_CASE("cuBLASLt plans are cached per problem") {
  const Tensor a = randn({24, 40}).to(kCUDA), b = randn({40, 8}).to(kCUDA);
  (void)mm(a, b);
  const auto before = cuda::blas::lt_cache_stats();
  for (int i = 0; i < 3; ++i) (void)mm(a, b);
  const auto after = cuda::blas::lt_cache_stats();
  CHECK(after.plans == before.plans);
  CHECK(after.hits == before.hits + 3);
}

TEST_CASE("cuBLASLt epilogues: bias, ReLU, GELU and the bias gradient") {
  manual_seed(14);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const int64_t m = 32, k = 48, n = 24;
    const Tensor a = randn({m, k}, d), b = randn({k, n}, d), bias = randn({n}, d);
    const Tensor ga = a.to(kCUDA), gb = b.to(kCUDA), gbias = bias.to(kCUDA);
    const Tensor plain = mm(a.to(kFloat32), b.to(kFloat32));
    const Tensor with_bias = plain + bias.to(kFloat32);
    auto run = [&](cuda::blas::Epilogue e, const Tensor& out, void* bias_grad = nullptr) {
      cuda::blas::GemmProblem p;
      p.dtype = d;
      p.m = m;
      p.n = n;
      p.k = k;
      p.a = {ga.raw_data(), k, 1, 0};
      p.b = {gb.raw_data(), n, 1, 0};
      p.d = out.raw_data();
      p.ldd = n;
      p.epilogue = e;
      p.bias = bias_grad ? nullptr : gbias.raw_data();
      p.bias_grad = bias_grad;
      cuda::blas::lt_matmul(p);
      return out;
    };
    const Tolerance tol = gemm_tolerance(d, k);
    using cuda::blas::Epilogue;
    check_close(run(Epilogue::Bias, empty({m, n}, TensorOptions(d).device(kCUDA))).to(kFloat32), with_bias, tol);
    check_close(run(Epilogue::BiasRelu, empty({m, n}, TensorOptions(d).device(kCUDA))).to(kFloat32), relu(with_bias),
                tol);
    check_close(run(Epilogue::Relu, empty({m, n}, TensorOptions(d).device(kCUDA))).to(kFloat32), relu(plain), tol);
    check_close(run(Epilogue::BiasGelu, empty({m, n}, TensorOptions(d).device(kCUDA))).to(kFloat32),
                gelu(with_bias, true), tol);
    // Bias gradient of A: the sum over k of each row of A, length m.
    const Tensor grad = zeros({m}, TensorOptions(d).device(kCUDA));
    check_close(run(Epilogue::BiasGradA, empty({m, n}, TensorOptions(d).device(kCUDA)), grad.raw_data()).to(kFloat32),
                plain, tol);
    check_close(grad.to(kFloat32), sum(a.to(kFloat32), {1}), gemm_tolerance(d, k));
  }
}
#endif
