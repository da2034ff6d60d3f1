// SGD against hand-computed PyTorch updates; the skip flag; state_dict round trip.
#include "framework/ops/optim_update_kernels.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

TEST_CASE("SGD with momentum, weight decay and nesterov follows PyTorch's update rule") {
  // p=1, grads 1 then 2; lr .1, momentum .9, wd .1:
  // step1: d = 1 + .1*1 = 1.1, buf = 1.1, p = 1 - .11 = .89
  // step2: d = 2 + .089 = 2.089, buf = .9*1.1 + 2.089 = 3.079, p = .89 - .3079 = .5821
  Tensor p = ones({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  p.set_grad(ones({1}));
  opt.step();
  CHECK(p.item<float>() == doctest::Approx(0.89));
  p.set_grad(full({1}, 2.0));
  opt.step();
  CHECK(p.item<float>() == doctest::Approx(0.5821));
  // Nesterov: d = g + momentum * buf.
  Tensor q = ones({1}).requires_grad_();
  optim::SGD nes({q}, {.lr = 0.1, .momentum = 0.5, .nesterov = true});
  q.set_grad(ones({1}));
  nes.step();  // buf = 1, d = 1 + .5 = 1.5
  CHECK(q.item<float>() == doctest::Approx(0.85));
}

TEST_CASE("a non-zero skip flag leaves parameters and state bit for bit unchanged") {
  Tensor p = tensor(std::vector<float>{1.5f, -2.0f}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(ones({2}));
  opt.step(ones({1}));
  CHECK(p.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(opt.steps() == 0);
  opt.step(zeros({1}));
  CHECK(opt.steps() == 1);
  check_close(p, tensor(std::vector<float>{1.4f, -2.1f}));
}

TEST_CASE("zero_grad and state_dict round trip") {
  Tensor p = ones({2}).requires_grad_();
  optim::SGD a({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(ones({2}));
  a.step();
  optim::SGD b({p}, {.lr = 0.5});
  b.load_state_dict(a.state_dict());
  CHECK(b.lr() == 0.1);
  CHECK(b.options().momentum == 0.9);
  CHECK(b.steps() == 1);
  CHECK(b.state_dict().at("state.0.momentum_buffer").to_vector<float>() == std::vector<float>{1, 1});
  a.zero_grad();
  CHECK_FALSE(p.grad().defined());
  auto sd = a.state_dict();
  sd["bogus"] = ones({1});
  check_error([&] { b.load_state_dict(sd); }, {"[SGD]", "unexpected key 'bogus'"});
  check_error([] { optim::SGD({ones({1}, kInt64)}); }, {"[SGD]", "parameter 0"});
}

namespace {
// `steps` SGD steps on parameters of `dt` (one large enough to be split across threads), laid
// out contiguously or strided (updated through a contiguous copy). Initial values and gradients
// are the same randn draws rounded to `values`. Returns the parameters and then the momentum
// buffers.
TensorList sgd_run(const optim::SGDOptions& o, Dtype dt, bool strided, Dtype values) {
  manual_seed(5);
  TensorList params;
  for (const Shape& s : {Shape{300, 257}, Shape{7, 5}, Shape{3}}) {
    const Tensor v = randn(s).to(values).to(dt);
    params.push_back((strided ? test::non_contiguous(v) : v.clone()).requires_grad_());
    REQUIRE(params.back().is_contiguous() != strided);
  }
  optim::SGD opt(params, o);
  for (int s = 0; s < 3; ++s) {
    manual_seed(100 + s);
    for (Tensor& p : params) p.set_grad(randn(p.shape()).to(values).to(dt));
    opt.step();
  }
  TensorList out;
  for (const Tensor& p : params) out.push_back(p.detach().clone());
  if (o.momentum != 0)
    for (size_t i = 0; i < params.size(); ++i)
      out.push_back(opt.state_dict().at(fmt::format("state.{}.momentum_buffer", i)));
  return out;
}

// The same run written with tensor ops (PyTorch's rule, step by step): an independent check of
// the fused kernel, which is the optimizer's only implementation.
TensorList sgd_composed(const optim::SGDOptions& o, Dtype dt, Dtype values) {
  NoGradGuard no_grad;
  manual_seed(5);
  TensorList params, bufs;
  for (const Shape& s : {Shape{300, 257}, Shape{7, 5}, Shape{3}}) params.push_back(randn(s).to(values).to(dt));
  for (int s = 0; s < 3; ++s) {
    manual_seed(100 + s);
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor& p = params[i];
      Tensor d = randn(p.shape()).to(values).to(dt);
      if (o.weight_decay != 0) d = d + p * o.weight_decay;
      if (o.momentum != 0) {
        if (bufs.size() <= i)
          bufs.push_back(d.clone());
        else
          bufs[i].mul_(o.momentum).add_(d, 1.0 - o.dampening);
        d = o.nesterov ? d + bufs[i] * o.momentum : bufs[i];
      }
      p.add_(d, -o.lr);
    }
  }
  for (const Tensor& b : bufs) params.push_back(b);
  return params;
}
}  // namespace

TEST_CASE("the fused CPU SGD kernel matches the composed tensor-op update") {
  const std::vector<optim::SGDOptions> cases{
      {.lr = 0.1},
      {.lr = 0.1, .weight_decay = 0.05},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true},
      {.lr = 0.1, .momentum = 0.5, .nesterov = true},
  };
  for (Dtype dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (const auto& o : cases) {
      CAPTURE(dt);
      CAPTURE(o.momentum);
      CAPTURE(o.dampening);
      CAPTURE(o.weight_decay);
      CAPTURE(o.nesterov);
      const TensorList fused = sgd_run(o, dt, false, dt);
      // The same operations in the same order, but the compiler fuses multiply-adds (FMA) in
      // different places in the two paths, so float32/float64 agree to a few ulps, not bit for
      // bit. 16-bit parameters are computed in float and rounded once per step where the
      // composed path rounds every intermediate: they are checked against float64.
      const bool reduced = is_reduced_float(dt);
      const TensorList reference = sgd_composed(o, reduced ? kFloat64 : dt, dt);
      const test::Tolerance tol = reduced          ? test::tolerance(dt)
                                  : dt == kFloat32 ? test::Tolerance{1e-6, 1e-6}
                                                   : test::Tolerance{1e-14, 1e-14};
      REQUIRE(fused.size() == reference.size());
      for (size_t i = 0; i < fused.size(); ++i) {
        CHECK(fused[i].dtype() == dt);
        check_close(fused[i], reference[i], tol);
      }
    }
  }
}

TEST_CASE("SGD updates strided parameters bit for bit as contiguous ones") {
  const std::vector<optim::SGDOptions> cases{
      {.lr = 0.1, .weight_decay = 0.05},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true},
  };
  for (Dtype dt : {kFloat32, kBFloat16}) {
    for (const auto& o : cases) {
      CAPTURE(dt);
      CAPTURE(o.momentum);
      CAPTURE(o.nesterov);
      const TensorList dense = sgd_run(o, dt, false, dt), strided = sgd_run(o, dt, true, dt);
      REQUIRE(dense.size() == strided.size());
      for (size_t i = 0; i < dense.size(); ++i) check_close(strided[i], dense[i], test::Tolerance{0, 0});  // exact
    }
  }
}

TEST_CASE("the fused CPU SGD kernel honours the skip flag and copies the first gradient") {
  manual_seed(3);
  const Tensor p = randn({50000}), g = randn({50000}), buf = randn({50000});
  const Tensor ready = zeros({1}, kInt32);
  const Tensor p0 = p.clone(), buf0 = buf.clone();
  const optim::SgdHyper h{.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0, .nesterov = false};
  optim::sgd_update_stub(kCPU, p, g, buf, ready, ones({1}), Tensor(), h);
  check_close(p, p0, {0, 0});
  check_close(buf, buf0, {0, 0});
  CHECK(ready.item<int32_t>() == 0);
  // Not skipped: the first step copies g into the buffer whatever it held (no dampening).
  optim::sgd_update_stub(kCPU, p, g, buf, ready, zeros({1}), Tensor(), h);
  check_close(buf, g, {0, 0});
  check_close(p, p0 - g * 0.1, {1e-6, 1e-6});
  CHECK(ready.item<int32_t>() == 1);
  // Then it blends: buf = .9 buf + .5 g.
  optim::sgd_update_stub(kCPU, p, g, buf, ready, Tensor(), Tensor(), h);
  check_close(buf, g * 0.9 + g * 0.5, {1e-6, 1e-6});
}

TEST_CASE("the fused float32 SGD kernel: its 16-lane body and its scalar ends give the same bits") {
  // Equal inputs everywhere, so every output must be equal: 649 values are 40 vectors and a
  // 9-value scalar tail. Values where a differently contracted multiply-add shows in the last bit.
  const int64_t n = 16 * 40 + 9;
  const auto all_same = [](const Tensor& t) { return hg::test::bitwise_equal(t, t.narrow(0, 0, 1).expand(t.shape())); };
  for (const optim::SgdHyper& h :
       {optim::SgdHyper{.lr = 0.1, .momentum = 0, .dampening = 0, .weight_decay = 0, .nesterov = false},
        optim::SgdHyper{.lr = 0.037, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.013, .nesterov = false},
        optim::SgdHyper{.lr = 0.07, .momentum = 0.8, .dampening = 0, .weight_decay = 0.1, .nesterov = true}}) {
    for (const Dtype copy_dtype : {kFloat32, kBFloat16, kFloat16}) {  // kFloat32: no warm copy
      CAPTURE(h.momentum);
      CAPTURE(dtype_name(copy_dtype));
      const Tensor p = full({n}, 0.7301), g = full({n}, -1.2345), buf = full({n}, 0.3331);
      const Tensor ready = zeros({1}, kInt32);
      const Tensor copy = copy_dtype == kFloat32 ? Tensor() : empty({n}, copy_dtype);
      for (int step = 0; step < 3; ++step) {  // the first step copies g into the buffer, later ones blend
        optim::sgd_update_stub(kCPU, p, g, h.momentum != 0 ? buf : Tensor(), ready, Tensor(), copy, h);
        CHECK(all_same(p));
        CHECK(all_same(buf));
        if (copy.defined()) CHECK(hg::test::bitwise_equal(copy, p.to(copy_dtype)));
      }
    }
  }
}

TEST_CASE("SGD state_dict round trip continues the fused momentum") {
  Tensor p = tensor(std::vector<float>{1, 2}).requires_grad_();
  optim::SGD a({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(ones({2}));
  a.step();
  Tensor q = p.detach().clone().requires_grad_();
  optim::SGD b({q}, {.lr = 0.1, .momentum = 0.9});
  q.set_grad(full({2}, 3.0));
  b.step();  // b's own buffer, replaced below
  q.detach().copy_(p.detach());
  b.load_state_dict(a.state_dict());
  p.set_grad(full({2}, 2.0));
  q.set_grad(full({2}, 2.0));
  a.step();
  b.step();  // buf = .9 * 1 + 2 = 2.9 on both
  check_close(q, p, {0, 0});
  CHECK(b.state_dict().at("state.0.momentum_buffer").to_vector<float>() == std::vector<float>{2.9f, 2.9f});
}
