// Channels-last (NHWC) on CUDA: cuDNN convolutions on NHWC strides against NCHW on the device,
// batch_norm's NHWC kernels and the fused batch_norm_add_relu against the CPU reference, and
// elementwise ops keeping the format (their outputs' strides, the same values as NCHW's).
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::row_tolerance;
using hg::test::Tolerance;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

bool channels_last(const Tensor& t) { return t.is_contiguous(kCL) && !t.is_contiguous(); }

// A CUDA leaf of x's values in `format`.
Tensor leaf(const Tensor& x, MemoryFormat format) { return x.detach().to(kCUDA).contiguous(format).requires_grad_(); }

// cuDNN picks other algorithms for the two layouts: the sums come in other orders.
Tolerance conv_tolerance(Dtype d) {
  switch (d) {
    case kFloat32: return {1e-4, 1e-4};
    case kFloat16: return {1e-2, 1e-2};
    default: return {5e-2, 5e-2};
  }
}
}  // namespace

TEST_CASE("cuda conv2d on channels-last operands (cuDNN NHWC) matches NCHW, forward and backward") {
  manual_seed(21);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    // A ResNet stem-like 7x7 stride 2, a 3x3 and a 1x1 with a bias, and a grouped one.
    struct Case {
      Shape x, w;
      std::vector<int64_t> stride, padding;
      int64_t groups;
      bool bias;
    };
    for (const Case& c : {Case{{2, 3, 20, 20}, {16, 3, 7, 7}, {2}, {3}, 1, false},
                          Case{{2, 16, 9, 9}, {32, 16, 3, 3}, {1}, {1}, 1, false},
                          Case{{2, 32, 5, 5}, {64, 32, 1, 1}, {2}, {0}, 1, true},
                          Case{{2, 8, 6, 6}, {8, 2, 3, 3}, {1}, {1}, 4, false}}) {
      CAPTURE(c.x);
      CAPTURE(c.w);
      const Tensor x = randn(c.x).to(d), w = (randn(c.w) * 0.2).to(d);
      const Tensor b = c.bias ? randn({c.w[0]}).to(d).to(kCUDA).requires_grad_() : Tensor();
      std::vector<Tensor> outs, gxs, gws;
      for (MemoryFormat f : {MemoryFormat::Contiguous, kCL}) {
        const Tensor xi = leaf(x, f), wi = leaf(w, f);
        const Tensor y = conv2d(xi, wi, b, c.stride, c.padding, {1}, c.groups);
        CHECK(channels_last(y) == (f == kCL));
        const Tensor g = ones_like(y).contiguous(f) * 0.5;
        y.backward(g);
        CHECK(channels_last(xi.grad()) == (f == kCL));
        if (c.w[2] * c.w[3] > 1) CHECK(channels_last(wi.grad()) == (f == kCL));  // a 1x1 weight is both
        outs.push_back(y.detach());
        gxs.push_back(xi.grad());
        gws.push_back(wi.grad());
      }
      check_close(outs[1].to(kCPU).to(kFloat64), outs[0].to(kCPU).to(kFloat64), conv_tolerance(d));
      check_close(gxs[1].to(kCPU).to(kFloat64), gxs[0].to(kCPU).to(kFloat64), conv_tolerance(d));
      check_close(gws[1].to(kCPU).to(kFloat64), gws[0].to(kCPU).to(kFloat64), conv_tolerance(d));
      // And the CPU's values (NCHW there).
      check_close(
          outs[1].to(kCPU).to(kFloat64),
          conv2d(x, w, b.defined() ? b.detach().to(kCPU) : Tensor(), c.stride, c.padding, {1}, c.groups).to(kFloat64),
          conv_tolerance(d));
    }
  }
}

TEST_CASE("cuda batch_norm on channels-last input (NHWC kernels) matches the CPU, forward and backward") {
  manual_seed(22);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    // Fewer channels than a block's 32, a count that is not a multiple of 32, and a large map
    // (many row chunks per channel).
    for (const Shape& shape : {Shape{4, 3, 7, 7}, Shape{2, 70, 5, 6}, Shape{8, 64, 56, 56}}) {
      for (bool training : {true, false}) {
        CAPTURE(dtype_name(d));
        CAPTURE(shape);
        CAPTURE(training);
        const int64_t c = shape[1];
        const Tensor x = randn(shape).to(d), w = randn({c}), b = randn({c});
        const Tensor rm0 = randn({c}) * 0.1, rv0 = rand({c}) + 0.5;
        Tensor rm_cpu = rm0.clone(), rv_cpu = rv0.clone();
        Tensor rm_gpu = rm0.to(kCUDA), rv_gpu = rv0.to(kCUDA);
        const Tensor xc = x.detach().requires_grad_(), wc = w.detach().requires_grad_(),
                     bc = b.detach().requires_grad_();
        const Tensor xg = leaf(x, kCL), wg = leaf(w, MemoryFormat::Contiguous), bg = leaf(b, MemoryFormat::Contiguous);
        const Tensor yc = batch_norm(xc, rm_cpu, rv_cpu, wc.to(d), bc.to(d), training, 0.1, 1e-5);
        const Tensor yg = batch_norm(xg, rm_gpu, rv_gpu, wg.to(d), bg.to(d), training, 0.1, 1e-5);
        CHECK(channels_last(yg));
        const Tensor g = randn(shape).to(d);
        yc.backward(g);
        yg.backward(g.to(kCUDA).contiguous(kCL));
        CHECK(channels_last(xg.grad()));
        const Tolerance tol = row_tolerance(d);
        check_close(yg.to(kCPU).to(kFloat64), yc.to(kFloat64), tol);
        check_close(rm_gpu.to(kCPU), rm_cpu, row_tolerance(kFloat32));
        check_close(rv_gpu.to(kCPU), rv_cpu, row_tolerance(kFloat32));
        check_close(xg.grad().to(kCPU).to(kFloat64), xc.grad().to(kFloat64), {tol.atol * 4, tol.rtol * 4});
        check_close(wg.grad().to(kCPU), wc.grad(), {2e-3, 2e-3});
        check_close(bg.grad().to(kCPU), bc.grad(), {2e-3, 2e-3});
      }
    }
  }
}

TEST_CASE("cuda batch_norm_add_relu (fused in the normalising pass) matches its CPU reference") {
  manual_seed(23);
  for (Dtype d : {kFloat32, kBFloat16}) {
    for (MemoryFormat f : {MemoryFormat::Contiguous, kCL}) {
      for (bool with_residual : {true, false}) {
        CAPTURE(dtype_name(d));
        CAPTURE(f == kCL);
        CAPTURE(with_residual);
        const Shape shape{4, 40, 9, 9};
        const Tensor x = randn(shape).to(d), r = randn(shape).to(d), w = randn({40}).to(d), b = randn({40}).to(d);
        Tensor rm_cpu = zeros({40}), rv_cpu = ones({40}), rm_gpu = zeros({40}, kCUDA), rv_gpu = ones({40}, kCUDA);
        const Tensor xc = x.detach().requires_grad_(), rc = r.detach().requires_grad_();
        const Tensor xg = leaf(x, f), rg = leaf(r, f);
        const Tensor yc =
            batch_norm_add_relu(xc, rm_cpu, rv_cpu, w, b, with_residual ? rc : Tensor(), true);  // the reference
        const Tensor yg =
            batch_norm_add_relu(xg, rm_gpu, rv_gpu, w.to(kCUDA), b.to(kCUDA), with_residual ? rg : Tensor(), true);
        CHECK(channels_last(yg) == (f == kCL));
        const Tensor g = randn(shape).to(d);
        yc.backward(g);
        yg.backward(g.to(kCUDA).contiguous(f));
        const Tolerance tol = row_tolerance(d);
        check_close(yg.to(kCPU).to(kFloat64), yc.to(kFloat64), tol);
        check_close(rv_gpu.to(kCPU), rv_cpu, row_tolerance(kFloat32));
        check_close(xg.grad().to(kCPU).to(kFloat64), xc.grad().to(kFloat64), {tol.atol * 4, tol.rtol * 4});
        if (with_residual) check_close(rg.grad().to(kCPU).to(kFloat64), rc.grad().to(kFloat64), tol);
      }
    }
  }
}

TEST_CASE("cuda elementwise ops, casts and dropout keep channels-last strides, with NCHW's values") {
  manual_seed(24);
  const Tensor a = randn({4, 24, 7, 7}, kCUDA).to(kBFloat16), b = randn({4, 24, 7, 7}, kCUDA).to(kBFloat16);
  const Tensor ac = a.contiguous(kCL), bc = b.contiguous(kCL);
  const Tensor bias = randn({1, 24, 1, 1}, kCUDA).to(kBFloat16);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"relu", [](const Tensor& x, const Tensor&) { return relu(x); }},
      {"add", [](const Tensor& x, const Tensor& y) { return x + y; }},
      {"mul", [](const Tensor& x, const Tensor& y) { return x * y; }},
      {"add bias", [&](const Tensor& x, const Tensor&) { return x + bias; }},
      {"to float32", [](const Tensor& x, const Tensor&) { return x.to(kFloat32); }},
      {"to float16", [](const Tensor& x, const Tensor&) { return x.to(kFloat16); }},
  };
  for (const auto& [name, f] : ops) {
    CAPTURE(name);
    const Tensor ref = f(a, b), got = f(ac, bc);
    CHECK(channels_last(got));
    CHECK(hg::test::bitwise_equal(got.to(kCPU), ref.to(kCPU)));
  }
  const Tensor dropped = dropout(ac, 0.5, true);
  CHECK(channels_last(dropped));
  // Under autocast, a channels-last activation is cast to a channels-last float16 copy.
  {
    amp::AutocastGuard autocast(kCUDA, kFloat16);
    const Tensor x = randn({2, 8, 6, 6}, kCUDA).contiguous(kCL), w = randn({8, 8, 3, 3}, kCUDA).contiguous(kCL);
    const Tensor y = conv2d(x, w, Tensor(), {1}, {1});
    CHECK(y.dtype() == kFloat16);
    CHECK(channels_last(y));
  }
}
