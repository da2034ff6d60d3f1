// Edge cases on CUDA that the per-family suites do not reach: empty inputs for every op family,
// one tensor larger than 2^31 elements (int64 indexing, multi-pass grid-stride loops), column
// sums (the sum_columns kernel and its split across blocks), the cuBLASLt bias-gradient
// epilogues with both operand layouts, and float64 convolution (direct kernels, not cuDNN).
#include "helpers.h"

#ifdef HG_WITH_CUDA
#include "kernels/cuda/blas/lt_matmul.h"
#include "kernels/cuda/column_sum.h"
#endif

using namespace hg;
using hg::test::check_close;
using hg::test::check_cuda_matches_cpu;
using hg::test::check_error;
using hg::test::cuda_tolerance;
using hg::test::Tolerance;

namespace {
using Inputs = std::vector<Tensor>;

// f on empty CPU inputs and their CUDA copies: same shape, dtype and (empty or reduced) values;
// an op that throws on the CPU must throw on CUDA too (bad indices and targets: at the next
// synchronisation, as they are found on the device).
void check_empty(const char* what, const std::function<Tensor(const Inputs&)>& f, const Inputs& cpu) {
  CAPTURE(what);
  bool cpu_threw = false;
  Tensor expected;
  try {
    expected = f(cpu);
  } catch (const Error&) {
    cpu_threw = true;
  }
  if (cpu_threw) {
    CHECK_THROWS_AS(
        [&] {
          f(hg::test::to_cuda(cpu));
          cuda::synchronize();
        }(),
        Error);
    return;
  }
  const Tensor actual = f(hg::test::to_cuda(cpu));
  REQUIRE(actual.device().is_cuda());
  CHECK(actual.dtype() == expected.dtype());
  check_close(actual, expected, Tolerance{0, 0});
}
}  // namespace

TEST_CASE("every op family accepts empty inputs on CUDA as on the CPU") {
  const Tensor e = randn({0, 7}), e4 = randn({0, 3, 5, 5});
  const Tensor labels = zeros({0}, kInt64);
  check_empty("copy", [](const Inputs& in) { return in[0].to(kFloat16); }, {e});
  check_empty("binary", [](const Inputs& in) { return in[0] * in[1] + 1.0; }, {e, randn({7})});
  check_empty("unary", [](const Inputs& in) { return gelu(exp(in[0])); }, {e});
  check_empty("sum rows", [](const Inputs& in) { return sum(in[0], {1}); }, {e});
  check_empty("sum columns", [](const Inputs& in) { return sum(in[0], {0}); }, {e});
  check_empty("sum all", [](const Inputs& in) { return sum(in[0]); }, {e});
  check_empty("max", [](const Inputs& in) { return max(in[0], 1).first; }, {e});
  check_empty("mm k=0", [](const Inputs& in) { return mm(in[0], in[1]); }, {randn({3, 0}), randn({0, 4})});
  check_empty("mm m=0", [](const Inputs& in) { return mm(in[0], in[1]); }, {e, randn({7, 4})});
  check_empty("softmax", [](const Inputs& in) { return softmax(in[0], -1); }, {e});
  check_empty("log_softmax", [](const Inputs& in) { return log_softmax(in[0], -1); }, {e});
  check_empty("cross_entropy sum", [](const Inputs& in) { return cross_entropy(in[0], in[1], Reduction::Sum); },
              {e, labels});
  check_empty("nll_loss none", [](const Inputs& in) { return nll_loss(in[0], in[1], Reduction::None); }, {e, labels});
  check_empty("mse_loss sum", [](const Inputs& in) { return mse_loss(in[0], in[1], Reduction::Sum); }, {e, e});
  check_empty("layer_norm", [](const Inputs& in) { return layer_norm(in[0], {7}, in[1], in[2]); },
              {e, randn({7}), randn({7})});
  check_empty("max_pool2d", [](const Inputs& in) { return max_pool2d(in[0], {2, 2}); }, {e4});
  check_empty("avg_pool2d", [](const Inputs& in) { return avg_pool2d(in[0], {2, 2}); }, {e4});
  check_empty("conv2d", [](const Inputs& in) { return conv2d(in[0], in[1], in[2]); },
              {e4, randn({4, 3, 3, 3}), randn({4})});
  check_empty("index_select", [](const Inputs& in) { return index_select(in[0], 0, in[1]); }, {randn({5, 7}), labels});
  check_empty("embedding", [](const Inputs& in) { return embedding(in[0], in[1]); }, {randn({5, 7}), labels});
  check_empty("dropout", [](const Inputs& in) { return dropout(in[0], 0.5, true); }, {e});
  check_empty("where", [](const Inputs& in) { return where(in[0] > 0.0, in[0], in[1]); }, {e, e});
}

TEST_CASE("column sums on CUDA: sum over leading dims, long columns split across blocks") {
  manual_seed(31);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    CAPTURE(dtype_name(d));
    for (const auto& [rows, cols] : std::vector<std::array<int64_t, 2>>{{5, 3}, {64, 1000}, {20000, 3}, {3000, 77}}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const Tensor x = is_floating(d) ? randn({rows, cols}, d) : (randn({rows, cols}, kFloat64) * 5.0).to(d);
      const double n = static_cast<double>(rows);
      const Tolerance tol = d == kInt64     ? Tolerance{0, 0}
                            : d == kFloat64 ? Tolerance{1e-10, 1e-10}
                            : d == kFloat32 ? Tolerance{1e-4 * std::sqrt(n), 1e-5}
                                            : Tolerance{cuda_tolerance(d).atol * std::sqrt(n), 1e-2};
      check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], {0}); }, {x}, tol);
      // [2, rows/2, cols] over dims 0 and 1: still the leading dims of a contiguous tensor.
      if (rows % 2 == 0)
        check_cuda_matches_cpu(
            [rows, cols](const Inputs& in) {
              return sum(in[0].reshape({2, rows / 2, cols}), {0, 1});
            },
            {x}, tol);
    }
  }
#ifdef HG_WITH_CUDA
  // The raw entry with a transposed layout (stride_j != 1), as the bias-gradient fallback uses it.
  const Tensor a = randn({40, 300}).to(kCUDA);  // sums over the 300 columns of each row
  Tensor out = empty({40}, TensorOptions(kFloat32).device(kCUDA));
  cuda::column_sum(kFloat32, a.raw_data(), 300, 40, 1, 300, kFloat32, out.raw_data(), 0);
  check_close(out, sum(a.to(kCPU), {1}), Tolerance{1e-4, 1e-5});
#endif
}

#ifdef HG_WITH_CUDA
TEST_CASE("cuBLASLt bias-gradient epilogues with row- and column-major operands, batch refused") {
  manual_seed(32);
  using cuda::blas::Epilogue;
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const int64_t m = 48, k = 64, n = 40;
    const Tensor a = randn({m, k}, d), b = randn({k, n}, d);
    const Tensor ref = mm(a.to(kFloat32), b.to(kFloat32));
    const Tolerance tol{8 * cuda_tolerance(d).atol * std::sqrt(64.0), 8 * cuda_tolerance(d).rtol};
    for (bool a_col_major : {false, true}) {
      for (bool b_col_major : {false, true}) {
        CAPTURE(a_col_major);
        CAPTURE(b_col_major);
        // Column-major copies made on the device (a .t().contiguous().t() view).
        const Tensor ga = a_col_major ? a.to(kCUDA).t().contiguous().t() : a.to(kCUDA);
        const Tensor gb = b_col_major ? b.to(kCUDA).t().contiguous().t() : b.to(kCUDA);
        for (Epilogue e : {Epilogue::BiasGradA, Epilogue::BiasGradB}) {
          const bool grad_a = e == Epilogue::BiasGradA;
          CAPTURE(grad_a);
          const Tensor out = empty({m, n}, TensorOptions(d).device(kCUDA));
          const Tensor grad = full({grad_a ? m : n}, 7.0, TensorOptions(d).device(kCUDA));
          cuda::blas::GemmProblem p;
          p.dtype = d;
          p.m = m;
          p.n = n;
          p.k = k;
          p.a = {ga.raw_data(), ga.stride(0), ga.stride(1), 0};
          p.b = {gb.raw_data(), gb.stride(0), gb.stride(1), 0};
          p.d = out.raw_data();
          p.ldd = n;
          p.epilogue = e;
          p.bias_grad = grad.raw_data();
          cuda::blas::lt_matmul(p);
          check_close(out.to(kFloat32), ref, tol);
          const Tensor want = grad_a ? sum(a.to(kFloat32), {1}) : sum(b.to(kFloat32), {0});
          check_close(grad.to(kFloat32), want, tol);
        }
      }
    }
    // A batched bias gradient would sum every batch into one vector: refused.
    const Tensor x = randn({2, m, k}, d).to(kCUDA), y = randn({2, k, n}, d).to(kCUDA);
    const Tensor out = empty({2, m, n}, TensorOptions(d).device(kCUDA));
    const Tensor grad = empty({m}, TensorOptions(d).device(kCUDA));
    cuda::blas::GemmProblem p;
    p.dtype = d;
    p.batch = 2;
    p.m = m;
    p.n = n;
    p.k = k;
    p.a = {x.raw_data(), k, 1, m * k};
    p.b = {y.raw_data(), n, 1, k * n};
    p.d = out.raw_data();
    p.ldd = n;
    p.d_batch_stride = m * n;
    p.epilogue = Epilogue::BiasGradA;
    p.bias_grad = grad.raw_data();
    check_error([&] { cuda::blas::lt_matmul(p); }, {"[mm]", "bias-gradient", "batch 2"});
  }
}
#endif

TEST_CASE("float64 conv2d on CUDA (direct kernels) matches the CPU, forward and backward") {
  manual_seed(33);
  const Tensor x = randn({2, 4, 9, 8}, kFloat64), w = randn({6, 2, 3, 3}, kFloat64), b = randn({6}, kFloat64);
  for (const auto& [stride, pad, dil] : std::vector<std::array<int64_t, 3>>{{1, 0, 1}, {2, 1, 1}, {1, 2, 2}}) {
    CAPTURE(stride);
    CAPTURE(pad);
    CAPTURE(dil);
    auto run = [stride = stride, pad = pad, dil = dil](const Inputs& in) {
      const Tensor xi = in[0].detach().requires_grad_(), wi = in[1].detach().requires_grad_(),
                   bi = in[2].detach().requires_grad_();
      const Tensor y = conv2d(xi, wi, bi, {stride, stride}, {pad, pad}, {dil, dil}, 2);
      (y * y).sum().backward();
      return cat({y.detach().flatten(), xi.grad().flatten(), wi.grad().flatten(), bi.grad().flatten()});
    };
    check_cuda_matches_cpu(run, {x, w, b}, Tolerance{1e-10, 1e-10});
  }
}

TEST_CASE("one tensor over 2^31 elements through copy, add, sum, softmax and layer_norm") {
  // 2^31 + 4096 bfloat16 elements: 4 GiB each, about 16 GiB at the peak. Skipped (with a
  // message) where the device cannot hold that.
  const int64_t n = (int64_t{1} << 31) + 4096;
  try {
    Tensor x = zeros({n}, TensorOptions(kBFloat16).device(kCUDA));
    x.narrow(0, n - 3, 3).fill_(1.0);  // the only non-zeros, past element 2^31
    {
      const Tensor y = x.to(kFloat32);  // copy + conversion
      check_close(y.narrow(0, n - 4, 4).to(kCPU), tensor(std::vector<float>{0, 1, 1, 1}), Tolerance{0, 0});
      CHECK(sum(y).item<double>() == 3.0);
    }
    {
      const Tensor z = x + x;
      check_close(z.narrow(0, n - 4, 4).to(kCPU).to(kFloat32), tensor(std::vector<float>{0, 2, 2, 2}), Tolerance{0, 0});
      CHECK(sum(z, kFloat32).item<double>() == 6.0);
    }
    {
      // Two rows of 2^30 + 2048: the second ends with three ones.
      const int64_t row = n / 2;
      const Tensor s = softmax(x.reshape({2, row}), -1, kFloat32);
      const double denom = static_cast<double>(row - 3) + 3.0 * std::exp(1.0);
      const double r = 1.0 / static_cast<double>(row), e1 = std::exp(1.0);
      check_close(s.narrow(0, 0, 1).narrow(1, row - 4, 4).to(kCPU).flatten(),
                  tensor(std::vector<double>{r, r, r, r}).to(kFloat32), Tolerance{0, 1e-4});
      check_close(s.narrow(0, 1, 1).narrow(1, row - 4, 4).to(kCPU).flatten(),
                  tensor(std::vector<double>{1.0 / denom, e1 / denom, e1 / denom, e1 / denom}).to(kFloat32),
                  Tolerance{0, 1e-4});
      check_close(sum(s, {1}).to(kCPU), ones({2}), Tolerance{1e-3, 1e-3});
    }
    {
      // 2^21 + 4 rows of 1024: the last row holds the ones.
      const Tensor rows = x.reshape({n / 1024, 1024});
      const Tensor ln = layer_norm(rows, {1024});
      const Tensor last = rows.narrow(0, n / 1024 - 1, 1).to(kCPU).to(kFloat32);
      check_close(ln.narrow(0, n / 1024 - 1, 1).to(kCPU).to(kFloat32), layer_norm(last, {1024}), Tolerance{2e-2, 1e-2});
      check_close(ln.narrow(0, 0, 1).to(kCPU).to(kFloat32), zeros({1, 1024}), Tolerance{0, 0});
    }
  } catch (const Error& e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
    MESSAGE("skipped: the device has too little memory for the 2^31-element case (" << e.what() << ")");
    cuda::empty_cache();
  }
}

TEST_CASE("linear on CUDA (bias fused into the GEMM, bias gradient by column sums) matches the CPU") {
  manual_seed(34);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    set_allow_tf32(false);
    const Tensor x = randn({3, 50, 24}, d), w = randn({40, 24}, d) * 0.2, b = randn({40}, d);
    auto run = [](const Inputs& in) {
      const Tensor xi = in[0].detach().requires_grad_(), wi = in[1].detach().requires_grad_(),
                   bi = in[2].detach().requires_grad_();
      const Tensor y = linear(xi, wi, bi);
      (y.to(kFloat32) * y.to(kFloat32)).sum().backward();
      return cat({y.detach().flatten(), xi.grad().flatten(), wi.grad().flatten(), bi.grad().flatten()}).to(kFloat32);
    };
    const double t = d == kFloat64 ? 1e-5 : d == kFloat32 ? 1e-3 : 0.15;
    check_cuda_matches_cpu(run, {x, w, b}, Tolerance{t, d == kFloat64 || d == kFloat32 ? 1e-4 : 2e-2});
    // A strided bias and an input of zero rows.
    check_cuda_matches_cpu([](const Inputs& in) { return linear(in[0], in[1], in[2].slice(0, 0, 80, 2)); },
                           {x, w, randn({80}, d)}, Tolerance{t, 2e-2});
    check_cuda_matches_cpu([](const Inputs& in) { return linear(in[0], in[1], in[2]); }, {randn({0, 24}, d), w, b},
                           Tolerance{0, 0});
  }
}

TEST_CASE("layer_norm parameter gradients over many rows (blocked partial sums) match the CPU") {
  manual_seed(35);
  for (Dtype d : {kFloat32, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    for (const auto& [rows, cols] : std::vector<std::array<int64_t, 2>>{{4096, 64}, {3000, 1030}, {40, 8}}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const Tensor x = randn({rows, cols}, d), w = randn({cols}, d), b = randn({cols}, d), gy = randn({rows, cols}, d);
      auto run = [cols = cols](const Inputs& in) {
        const Tensor wi = in[1].detach().requires_grad_(), bi = in[2].detach().requires_grad_();
        layer_norm(in[0], {cols}, wi, bi).backward(in[3]);
        return cat({wi.grad(), bi.grad()}).to(kFloat64);
      };
      const double n = std::sqrt(static_cast<double>(rows));
      const Tolerance tol = d == kFloat64   ? Tolerance{1e-9, 1e-9}
                            : d == kFloat32 ? Tolerance{1e-4 * n, 1e-4}
                                            : Tolerance{3e-2 * n, 3e-2};
      check_cuda_matches_cpu(run, {x, w, b, gy}, tol);
    }
  }
}

TEST_CASE("batch_norm with few channels (each split across blocks) matches the CPU, train and eval") {
  manual_seed(36);
  for (Dtype d : {kFloat32, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    for (const Shape& shape : std::vector<Shape>{{64, 3, 32, 32}, {2, 3, 4, 4}, {16384, 5}}) {
      CAPTURE(shape[0]);
      const int64_t c = shape[1];
      const Tensor x = randn(shape, d) * 3.0 + 1.0, gy = randn(shape, d), w = randn({c}, d), b = randn({c}, d);
      for (bool training : {true, false}) {
        CAPTURE(training);
        auto run = [training, c](const Inputs& in) {
          const Device dev = in[0].device();
          const Tensor rm = zeros({c}, TensorOptions(in[0].dtype()).device(dev)) + 0.5;
          const Tensor rv = ones({c}, TensorOptions(in[0].dtype()).device(dev)) * 2.0;
          const Tensor xi = in[0].detach().requires_grad_(), wi = in[2].detach().requires_grad_(),
                       bi = in[3].detach().requires_grad_();
          const Tensor y = batch_norm(xi, rm, rv, wi, bi, training, 0.1, 1e-5);
          y.backward(in[1]);
          return cat({y.detach().flatten(), xi.grad().flatten(), wi.grad(), bi.grad(), rm, rv}).to(kFloat64);
        };
        const Tolerance tol = d == kFloat64   ? Tolerance{1e-9, 1e-9}
                              : d == kFloat32 ? Tolerance{2e-3, 1e-3}
                                              : Tolerance{0.5, 3e-2};
        check_cuda_matches_cpu(run, {x, gy, w, b}, tol);
      }
    }
  }
}

TEST_CASE("hooks that move a gradient to another device are refused, naming the hook") {
  // A leaf on CUDA whose tensor hook returns its gradient on the CPU: nothing reaches .grad (as
  // PyTorch's "hook has changed the type of value"). A post-accumulate-grad hook that moves .grad
  // is refused by .grad's setter first.
  Tensor x = ones({3}, kFloat32).to(kCUDA).requires_grad_();
  RemovableHandle to_cpu = x.register_hook([](const Tensor& g) { return g.to(kCPU); });
  check_error([&] { (x * 2.0).sum().backward(); }, {"[hook]", "gradient hook 1 of 1 on a leaf", "another device"});
  CHECK_FALSE(x.grad().defined());
  to_cpu.remove();

  Tensor y = x * 3.0;
  y.register_hook([](const Tensor& g) { return g.to(kCPU); });
  check_error([&] { y.sum().backward(); }, {"[hook]", "on an output of mul", "another device"});

  Tensor w = ones({2}, kFloat32).to(kCUDA).requires_grad_();
  w.register_post_accumulate_grad_hook([](const Tensor& t) { t.set_grad(t.grad().to(kCPU)); });
  check_error([&] { (w * 2.0).sum().backward(); }, {"[set_grad]"});
}
