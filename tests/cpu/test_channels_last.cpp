// Channels-last (NHWC) memory format, as PyTorch's torch.channels_last: the format is strides, the
// ops that preserve it (elementwise, casts, dropout, batch_norm, conv2d) give channels-last
// outputs and gradients for channels-last inputs, with the same values as on NCHW inputs (on the
// CPU the same kernels run, so the values are the same bits).
#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_close;
using hg::test::Tolerance;
using hg::test::tolerance;

namespace {
constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

bool channels_last(const Tensor& t) { return t.is_contiguous(kCL) && !t.is_contiguous(); }

// x laid out channels-last, as a leaf of its own when x requires grad.
Tensor as_cl(const Tensor& x) {
  Tensor c = x.detach().contiguous(kCL);
  if (x.requires_grad()) c.requires_grad_(true);
  return c;
}
}  // namespace

TEST_CASE("channels_last: the format is the NHWC strides") {
  const Tensor x = randn({2, 3, 4, 5});
  CHECK(x.is_contiguous(MemoryFormat::Contiguous));
  CHECK_FALSE(x.is_contiguous(kCL));
  CHECK(x.suggest_memory_format() == MemoryFormat::Contiguous);
  const Tensor c = x.contiguous(kCL);
  CHECK(c.strides() == Strides{60, 1, 15, 3});
  CHECK(c.is_contiguous(kCL));
  CHECK_FALSE(c.is_contiguous());
  CHECK(c.suggest_memory_format() == kCL);
  CHECK(bitwise_equal(c, x));
  CHECK(c.contiguous(kCL).is_same(c));  // already so: no copy
  CHECK(c.contiguous().is_contiguous());
  CHECK(bitwise_equal(c.contiguous(), x));
  // A permuted NCHW view is channels-last as PyTorch's x.permute(0, 3, 1, 2) of an NHWC tensor.
  const Tensor nhwc = randn({2, 4, 5, 3});
  CHECK(nhwc.permute({0, 3, 1, 2}).is_contiguous(kCL));
  // empty() in the format; C == 1 is both formats, and suggests contiguous.
  CHECK(empty({2, 3, 4, 5}, {}, kCL).strides() == Strides{60, 1, 15, 3});
  const Tensor one_channel = empty({2, 1, 4, 5}, {}, kCL);
  CHECK(one_channel.is_contiguous());
  CHECK(one_channel.suggest_memory_format() == MemoryFormat::Contiguous);
  // to() with a format, and casts that keep it.
  const Tensor h = x.to(Device(kCPU), kBFloat16, kCL);
  CHECK(channels_last(h));
  CHECK(bitwise_equal(h, x.to(kBFloat16)));
  CHECK(channels_last(c.to(kFloat16)));
  CHECK(channels_last(c.clone()));
  CHECK(channels_last(x.to(kCL)));
  // Bad input.
  CHECK_THROWS_WITH_AS(randn({3, 4, 5}).contiguous(kCL), doctest::Contains("[contiguous] channels_last needs a 4-d"),
                       Error);
  CHECK_THROWS_WITH_AS(x.is_contiguous(MemoryFormat::Preserve), doctest::Contains("[is_contiguous]"), Error);
}

TEST_CASE("channels_last: elementwise ops, casts and dropout keep the format, with the same values") {
  manual_seed(3);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor a = randn({2, 6, 5, 7}).to(d), b = randn({2, 6, 5, 7}).to(d);
    const Tensor bias = randn({1, 6, 1, 1}).to(d);
    const Tensor ac = a.contiguous(kCL), bc = b.contiguous(kCL);
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
        {"relu", [](const Tensor& x, const Tensor&) { return relu(x); }},
        {"add", [](const Tensor& x, const Tensor& y) { return x + y; }},
        {"mul", [](const Tensor& x, const Tensor& y) { return x * y; }},
        {"add bias", [&](const Tensor& x, const Tensor&) { return x + bias; }},
        {"scalar mul", [](const Tensor& x, const Tensor&) { return x * 0.5; }},
        {"to float32", [](const Tensor& x, const Tensor&) { return x.to(kFloat32); }},
        {"sigmoid", [](const Tensor& x, const Tensor&) { return sigmoid(x); }},
    };
    for (const auto& op : ops) {  // not a structured binding: clang 14 cannot CAPTURE one
      const auto& name = op.first;
      const auto& f = op.second;
      CAPTURE(name);
      const Tensor ref = f(a, b), got = f(ac, bc);
      CHECK(channels_last(got));
      CHECK(ref.is_contiguous());
      CHECK(bitwise_equal(got, ref));
    }
    // The first operand of the output's shape decides, as PyTorch's TensorIterator.
    CHECK(channels_last(ac + b));
    CHECK((a + bc).is_contiguous());
    // dropout: a channels-last mask; each element is dropped or scaled by 1 / (1 - p).
    const Tensor dropped = dropout(ac, 0.5, true);
    CHECK(channels_last(dropped));
    const auto av = ac.to(kFloat32).to_vector<float>(), dv = dropped.to(kFloat32).to_vector<float>();
    int kept = 0;
    for (size_t i = 0; i < av.size(); ++i) {
      const float scaled = static_cast<float>(Tensor(full({}, av[i] * 2.0, TensorOptions(d))).item<double>());
      CHECK((dv[i] == 0.0f || dv[i] == scaled));
      kept += dv[i] != 0.0f;
    }
    CHECK(kept > 0);
    CHECK(kept < static_cast<int>(av.size()));
  }
}

TEST_CASE("channels_last: elementwise gradients come back in the layout of their inputs") {
  const Tensor a = randn({2, 3, 4, 4}).contiguous(kCL).requires_grad_(), b = randn({2, 3, 4, 4}).requires_grad_();
  const Tensor y = relu(a * b + a);
  CHECK(channels_last(y));
  y.backward(ones_like(y).contiguous(kCL));
  CHECK(channels_last(a.grad()));
  NoGradGuard ng;
  const Tensor a0 = a.detach().contiguous(), b0 = b.detach();
  const Tensor mask = (a0 * b0 + a0 > 0.0).to(kFloat32);
  check_close(a.grad().contiguous(), mask * (b0 + 1.0));
  check_close(b.grad(), mask * a0);
}

TEST_CASE(
    "channels_last: batch_norm forward and backward keep the format; the CPU's NHWC kernels match the NCHW ones") {
  // The NHWC kernels sum along rows of [N*H*W, C] (16 channels per lane vector, a channel tail,
  // blocks of 64 rows), the NCHW ones along planes: the same values up to the sums' rounding.
  manual_seed(4);
  struct Case {
    Shape shape;
    Dtype dtype;
  };
  for (const Case& k : {Case{{3, 5, 4, 6}, kFloat32}, Case{{4, 37, 9, 7}, kFloat32}, Case{{4, 37, 9, 7}, kFloat64},
                        Case{{2, 48, 6, 6}, kBFloat16}, Case{{2, 20, 5, 5}, kFloat16}}) {
    for (bool training : {true, false}) {
      CAPTURE(training);
      CAPTURE(k.shape);
      CAPTURE(dtype_name(k.dtype));
      const int64_t c = k.shape[1];
      const Tensor x = randn(k.shape).to(k.dtype).requires_grad_(), w = randn({c}).requires_grad_(),
                   b = randn({c}).requires_grad_();
      const Tensor xc = as_cl(x);
      Tensor rm1 = randn({c}), rv1 = rand({c}) + 0.5, rm2 = rm1.clone(), rv2 = rv1.clone();
      const Tensor y = batch_norm(x, rm1, rv1, w, b, training, 0.1, 1e-5);
      const Tensor g = randn(y.shape()).to(k.dtype);
      const auto ref = autograd::grad({y}, {x, w, b}, {g});
      const Tensor yc = batch_norm(xc, rm2, rv2, w, b, training, 0.1, 1e-5);
      CHECK(channels_last(yc));
      const Tolerance tol = tolerance(k.dtype);
      check_close(yc, y, tol);
      check_close(rm2, rm1);
      check_close(rv2, rv1);
      const auto got = autograd::grad({yc}, {xc, w, b}, {g.contiguous(kCL)});
      CHECK(channels_last(got[0]));
      for (size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        check_close(got[i], ref[i], i == 0 ? tol : tolerance(kFloat32));
      }
    }
  }
}

TEST_CASE("channels_last: conv2d's output is channels-last when its input or weight is, gradients likewise") {
  manual_seed(6);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({2, 4, 7, 6}).to(d).requires_grad_(), w = randn({6, 4, 3, 3}).to(d).requires_grad_(),
                 b = randn({6}).to(d).requires_grad_();
    const Tensor y = conv2d(x, w, b, {2}, {1});
    const Tensor g = randn(y.shape()).to(d);
    const auto ref = autograd::grad({y}, {x, w, b}, {g});
    for (int which = 0; which < 3; ++which) {  // input, weight, both channels-last
      CAPTURE(which);
      const bool x_cl = which != 1, w_cl = which != 0;
      const Tensor xi = x_cl ? as_cl(x) : x, wi = w_cl ? as_cl(w) : w;
      const Tensor yi = conv2d(xi, wi, b, {2}, {1});
      CHECK(channels_last(yi));
      // The CPU runs channels-last calls NHWC on oneDNN's primitives, where the NCHW call of so
      // shallow a layer runs conv.cpp's own loops: the same values up to the sums' order.
      check_close(yi, y, tolerance(d));
      const auto got = autograd::grad({yi}, {xi, wi, b}, {g.contiguous(kCL)});
      CHECK(channels_last(got[0]) == x_cl);
      CHECK(channels_last(got[1]) == w_cl);
      for (size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        check_close(got[i], ref[i], tolerance(d));
      }
    }
  }
}

TEST_CASE(
    "channels_last: conv2d on the CPU's NHWC paths (in place for bfloat16, reordered for float32's blocks, widened "
    "float16, a 3-channel stem, chunks of unequal size), OIHW and OHWI weights, matches the NCHW call") {
  manual_seed(9);
  struct Case {
    int64_t n, c, o, side, stride;
    Dtype dtype;
  };
  for (const Case& k :
       {Case{5, 32, 48, 8, 1, kFloat32}, Case{5, 32, 48, 8, 1, kBFloat16}, Case{3, 16, 32, 9, 2, kFloat16},
        Case{4, 3, 16, 8, 1, kBFloat16}, Case{4, 3, 16, 8, 1, kFloat32}, Case{2, 64, 64, 4, 1, kBFloat16}}) {
    CAPTURE(k.c);
    CAPTURE(k.n);
    CAPTURE(dtype_name(k.dtype));
    const Tensor x = randn({k.n, k.c, k.side, k.side}).to(k.dtype).requires_grad_(),
                 w = (randn({k.o, k.c, 3, 3}) * 0.2).to(k.dtype).requires_grad_();
    const Tensor y = conv2d(x, w, Tensor(), {k.stride}, {1});
    const Tensor g = randn(y.shape()).to(k.dtype);
    const auto ref = autograd::grad({y}, {x, w}, {g});
    for (const bool w_cl : {false, true}) {  // the weight OIHW, or OHWI as a channels-last model's
      CAPTURE(w_cl);
      const Tensor xc = as_cl(x), wc = w_cl ? as_cl(w) : w;
      const Tensor yc = conv2d(xc, wc, Tensor(), {k.stride}, {1});
      REQUIRE(channels_last(yc));
      // Two float32 computations in different orders (the NCHW stem's weight gradient is a GEMM,
      // the NHWC one oneDNN's kernel with per-chunk partial sums): 1e-4 apart, not float32's 1e-5.
      const Tolerance tol = k.dtype == kFloat32 ? Tolerance{1e-4, 1e-4} : tolerance(k.dtype);
      check_close(yc, y, tol);
      const auto got = autograd::grad({yc}, {xc, wc}, {g.contiguous(kCL)});
      CHECK(channels_last(got[0]));
      CHECK(channels_last(got[1]) == w_cl);
      check_close(got[0], ref[0], tol);
      check_close(got[1], ref[1], tol);
    }
  }
}

TEST_CASE("channels_last: gradcheck of conv2d, batch_norm and mul on channels-last inputs") {
  manual_seed(7);
  const auto cl = [](const Tensor& t) { return t.contiguous(kCL); };
  CHECK(autograd::gradcheck(
      [&](const TensorList& v) {
        const Tensor y = conv2d(cl(v[0]), cl(v[1]), v[2], {1}, {1});
        REQUIRE(channels_last(y));
        return y;
      },
      {randn({2, 3, 4, 4}), randn({4, 3, 3, 3}), randn({4})}));
  CHECK(autograd::gradcheck(
      [&](const TensorList& v) {
        const Tensor y = batch_norm(cl(v[0]), Tensor(), Tensor(), v[1], v[2], true);
        REQUIRE(channels_last(y));
        return y;
      },
      {randn({3, 2, 3, 3}), randn({2}), randn({2})}));
  CHECK(autograd::gradcheck(
      [&](const TensorList& v) {
        const Tensor y = cl(v[0]) * cl(v[1]);
        REQUIRE(channels_last(y));
        return y;
      },
      {randn({2, 3, 2, 2}), randn({2, 3, 2, 2})}));
}

TEST_CASE("channels_last: Module::to(MemoryFormat) lays out 4-d parameters as PyTorch's model.to(memory_format)") {
  nn::Sequential net({std::make_shared<nn::Conv2d>(3, 4, 3), std::make_shared<nn::BatchNorm2d>(4)});
  net.to(kCL);
  for (const auto& named : net.named_parameters()) {  // not a structured binding: clang 14 cannot CAPTURE one
    const auto& name = named.first;
    const auto& p = named.second;
    CAPTURE(name);
    CHECK(p.requires_grad());
    if (p.dim() == 4) CHECK(channels_last(p));
    if (p.dim() != 4) CHECK(p.is_contiguous());
  }
  net.to(MemoryFormat::Contiguous);
  for (const Tensor& p : net.parameters()) CHECK(p.is_contiguous());
  CHECK_THROWS_WITH_AS(net.to(MemoryFormat::Preserve), doctest::Contains("[to]"), Error);
}

TEST_CASE(
    "channels_last: SGD and Adam update channels-last parameters in place, bit for bit as contiguous ones, their "
    "state in the same layout") {
  manual_seed(10);
  const auto make = [](bool adam, const Tensor& w) -> std::unique_ptr<optim::Optimizer> {
    if (adam) return std::make_unique<optim::Adam>(TensorList{w}, optim::AdamOptions{.lr = 0.01});
    return std::make_unique<optim::SGD>(TensorList{w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  };
  for (const bool adam : {false, true}) {
    for (const bool grad_cl : {true, false}) {  // the gradient in the parameter's layout, or contiguous
      CAPTURE(adam);
      CAPTURE(grad_cl);
      const Tensor w0 = randn({8, 16, 3, 3});
      Tensor dense = w0.clone().requires_grad_(), cl = as_cl(w0).requires_grad_();
      const auto opt_dense = make(adam, dense), opt_cl = make(adam, cl);
      const void* storage = cl.raw_data();
      for (int step = 0; step < 3; ++step) {
        const Tensor g = randn(w0.shape());
        dense.set_grad(g);
        cl.set_grad(grad_cl ? g.contiguous(kCL) : g);
        opt_dense->step();
        opt_cl->step();
      }
      CHECK(cl.raw_data() == storage);
      CHECK(channels_last(cl));
      CHECK(bitwise_equal(cl, dense));
      const auto st = opt_cl->state_dict(), st_dense = opt_dense->state_dict();
      const std::vector<std::string> keys = adam ? std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq"}
                                                 : std::vector<std::string>{"state.0.momentum_buffer"};
      for (const std::string& key : keys) {
        CAPTURE(key);
        CHECK(channels_last(st.at(key)));  // kept in the parameter's layout, so no step copies
        CHECK(bitwise_equal(st.at(key).contiguous(), st_dense.at(key)));
      }
    }
  }
}

TEST_CASE("channels_last: a ResNet basic block's forward and backward match NCHW's") {
  manual_seed(8);
  const auto block = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(4, 4, 3, nn::Conv2dOptions{.padding = {1, 1}, .bias = false}),
        std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(4, 4, 3, nn::Conv2dOptions{.padding = {1, 1}, .bias = false}),
        std::make_shared<nn::BatchNorm2d>(4)});
  };
  auto nchw = block(), nhwc = block();
  nhwc->load_state_dict(nchw->state_dict());
  nhwc->to(kCL);
  const Tensor x = randn({2, 4, 6, 6});
  const Tensor y1 = relu(nchw->forward(x) + x);
  const Tensor y2 = relu(nhwc->forward(x.contiguous(kCL)) + x.contiguous(kCL));
  CHECK(channels_last(y2));
  check_close(y2, y1, {1e-6, 1e-6});
  (y1 * y1).sum().backward();
  (y2 * y2).sum().backward();
  const auto p1 = nchw->named_parameters(), p2 = nhwc->named_parameters();
  REQUIRE(p1.size() == p2.size());
  for (size_t i = 0; i < p1.size(); ++i) {
    CAPTURE(p1[i].first);
    REQUIRE(p2[i].second.grad().defined());
    CHECK(p2[i].second.grad().strides() == p2[i].second.strides());
    // Batch norm's backward over 72 values a channel amplifies the sums' different order.
    check_close(p2[i].second.grad(), p1[i].second.grad(), {1e-4, 1e-4});
  }
}
