// Adam/AdamW against hand-computed PyTorch updates; schedulers; clip_grad_norm_.
#include <cmath>

#include "framework/ops/optim_update_kernels.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// Two steps with gradients g1 then g2 on a float64 parameter starting at 1; returns p after each.
template <class Opt, class Options>
std::vector<double> two_steps(Options options, std::vector<double> grads) {
  Tensor p = ones({1}, kFloat64).requires_grad_();
  Opt opt({p}, options);
  std::vector<double> out;
  for (double g : grads) {
    p.set_grad(full({1}, g, kFloat64));
    opt.step();
    out.push_back(p.item<double>());
  }
  return out;
}
}  // namespace

TEST_CASE("Adam follows PyTorch's update rule with bias correction") {
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
  auto p = two_steps<optim::Adam>(optim::AdamOptions{.lr = 0.1}, {1, 2});
  CHECK(p[0] == doctest::Approx(0.900000001).epsilon(1e-12));
  CHECK(p[1] == doctest::Approx(0.8034817990281663).epsilon(1e-12));
  // L2 weight decay adds wd * p to the gradient.
  p = two_steps<optim::Adam>(optim::AdamOptions{.lr = 0.1, .weight_decay = 0.1}, {1, 2});
  CHECK(p[0] == doctest::Approx(0.9000000009090909).epsilon(1e-12));
  CHECK(p[1] == doctest::Approx(0.8029473346876735).epsilon(1e-12));
  // AMSGrad divides by the running maximum of v: here v shrinks at step 2.
  p = two_steps<optim::Adam>(optim::AdamOptions{.lr = 0.1, .amsgrad = true}, {4, 0.01});
  CHECK(p[1] == doctest::Approx(0.832841652160461).epsilon(1e-12));
  p = two_steps<optim::Adam>(optim::AdamOptions{.lr = 0.1}, {4, 0.01});
  CHECK(p[1] == doctest::Approx(0.8328082579651988).epsilon(1e-12));
}

TEST_CASE("AdamW decays the weights directly") {
  auto p = two_steps<optim::AdamW>(optim::AdamWOptions{.lr = 0.1, .weight_decay = 0.1}, {1, 2});
  CHECK(p[0] == doctest::Approx(0.890000001).epsilon(1e-12));
  CHECK(p[1] == doctest::Approx(0.7845817990181663).epsilon(1e-12));
  CHECK(optim::AdamWOptions().weight_decay == 0.01);
  // Designated initialisers, as for SGD's and Adam's options; unnamed fields keep AdamW's defaults.
  Tensor w = ones({2}).requires_grad_();
  optim::AdamW opt({w}, {.lr = 1e-3, .weight_decay = 0.05});
  CHECK(opt.options().lr == 1e-3);
  CHECK(opt.options().weight_decay == 0.05);
  CHECK(opt.options().beta2 == 0.999);
  const optim::AdamWOptions defaults{.amsgrad = true};
  CHECK(defaults.weight_decay == 0.01);
}

TEST_CASE("Adam works elementwise on float32 and bfloat16 parameters") {
  for (Dtype dt : {kFloat32, kBFloat16}) {
    Tensor p = tensor(std::vector<float>{1, -1, 2}).to(dt).requires_grad_();
    optim::Adam opt({p}, {.lr = 0.1});
    p.set_grad(tensor(std::vector<float>{1, -3, 0}).to(dt));
    opt.step();
    // The first step moves each element by lr * sign(g) (0 where g is 0).
    check_close(p, tensor(std::vector<float>{0.9f, -0.9f, 2.0f}).to(dt));
    CHECK(p.dtype() == dt);
  }
}

namespace {
using Results = std::map<std::string, Tensor>;

// Three steps of Adam/AdamW on parameters of `dt` laid out contiguously or strided (updated
// through a contiguous copy), values and gradients rounded to `values`; the second parameter has
// no gradient at the first step. Returns the parameters ("param.<i>") and the state_dict's state.
Results adam_run(const optim::AdamOptions& o, bool decoupled, Dtype dt, bool strided, Dtype values) {
  manual_seed(7);
  TensorList params;
  for (const Shape& s : {Shape{200, 301}, Shape{9, 4}}) {
    const Tensor v = randn(s).to(values).to(dt);
    params.push_back((strided ? test::non_contiguous(v) : v.clone()).requires_grad_());
    REQUIRE(params.back().is_contiguous() != strided);
  }
  std::unique_ptr<optim::Adam> opt;
  if (decoupled) {
    opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = o.lr,
                                                                     .beta1 = o.beta1,
                                                                     .beta2 = o.beta2,
                                                                     .eps = o.eps,
                                                                     .weight_decay = o.weight_decay,
                                                                     .amsgrad = o.amsgrad});
  } else {
    opt = std::make_unique<optim::Adam>(params, o);
  }
  for (int s = 0; s < 3; ++s) {
    manual_seed(200 + s);
    for (size_t i = 0; i < params.size(); ++i)
      params[i].set_grad(s == 0 && i == 1 ? Tensor() : randn(params[i].shape()).to(values).to(dt));
    opt->step();
  }
  Results out;
  for (size_t i = 0; i < params.size(); ++i) out[fmt::format("param.{}", i)] = params[i].detach().clone();
  for (const auto& [key, t] : opt->state_dict())
    if (key.starts_with("state.")) out[key] = t;
  return out;
}

// The same run written with tensor ops (PyTorch's rule, step by step): an independent check of
// the fused kernel, which is the optimizer's only implementation.
Results adam_composed(const optim::AdamOptions& o, bool decoupled, Dtype dt, Dtype values) {
  NoGradGuard no_grad;
  manual_seed(7);
  TensorList params;
  for (const Shape& s : {Shape{200, 301}, Shape{9, 4}}) params.push_back(randn(s).to(values).to(dt));
  Results out;
  std::vector<int64_t> steps(params.size(), 0);
  for (int s = 0; s < 3; ++s) {
    manual_seed(200 + s);
    for (size_t i = 0; i < params.size(); ++i) {
      if (s == 0 && i == 1) continue;
      Tensor& p = params[i];
      Tensor g = randn(p.shape()).to(values).to(dt);
      if (o.weight_decay != 0) {
        if (decoupled)
          p.mul_(1.0 - o.lr * o.weight_decay);
        else
          g = g + p * o.weight_decay;
      }
      const std::string key = fmt::format("state.{}.", i);
      if (!out.count(key + "exp_avg")) {
        out[key + "exp_avg"] = zeros_like(p);
        out[key + "exp_avg_sq"] = zeros_like(p);
        if (o.amsgrad) out[key + "max_exp_avg_sq"] = zeros_like(p);
      }
      const int64_t t = ++steps[i];
      out[key + "step"] = scalar_tensor(static_cast<double>(t), kInt64);
      Tensor& m = out[key + "exp_avg"];
      Tensor& v = out[key + "exp_avg_sq"];
      m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
      v.mul_(o.beta2).add_(g * g, 1.0 - o.beta2);
      const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
      const double bias2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(t)));
      Tensor second = v;
      if (o.amsgrad) {
        Tensor& vmax = out[key + "max_exp_avg_sq"];
        vmax.copy_(maximum(vmax, v));
        second = vmax;
      }
      const Tensor denom = second.sqrt() / bias2_sqrt + o.eps;
      p.add_(m / denom, -o.lr / bias1);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) out[fmt::format("param.{}", i)] = params[i];
  return out;
}

void check_same_keys(const Results& a, const Results& b) {
  std::vector<std::string> ka, kb;
  for (const auto& [k, t] : a) ka.push_back(k);
  for (const auto& [k, t] : b) kb.push_back(k);
  REQUIRE(ka == kb);
}
}  // namespace

TEST_CASE("the fused CPU Adam/AdamW kernel matches the composed tensor-op update") {
  const std::vector<std::pair<optim::AdamOptions, bool>> cases{
      {{.lr = 0.01}, false},
      {{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1}, false},
      {{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true}, false},
      {{.lr = 0.01, .weight_decay = 0.1}, true},
      {{.lr = 0.02, .weight_decay = 0.05, .amsgrad = true}, true},
  };
  for (Dtype dt : {kFloat32, kFloat64, kBFloat16}) {
    for (const auto& c : cases) {
      const optim::AdamOptions& o = c.first;  // no structured binding: clang 14 cannot capture one
      const bool decoupled = c.second;
      CAPTURE(dt);
      CAPTURE(decoupled);
      CAPTURE(o.weight_decay);
      CAPTURE(o.amsgrad);
      // As for SGD: a few ulps apart in float32/float64 (the compiler's FMA placement differs),
      // and 16-bit parameters against a float64 run of the composed path.
      const bool reduced = is_reduced_float(dt);
      const Results fused = adam_run(o, decoupled, dt, false, dt);
      const Results reference = adam_composed(o, decoupled, reduced ? kFloat64 : dt, dt);
      const test::Tolerance tol = reduced          ? test::tolerance(dt)
                                  : dt == kFloat32 ? test::Tolerance{1e-6, 1e-6}
                                                   : test::Tolerance{1e-14, 1e-14};
      check_same_keys(fused, reference);
      for (const auto& entry : fused) {  // no structured binding: clang 14 cannot CAPTURE one
        const std::string& key = entry.first;
        CAPTURE(key);
        check_close(entry.second, reference.at(key), tol);
      }
    }
  }
}

TEST_CASE("Adam and AdamW update strided parameters bit for bit as contiguous ones") {
  const std::vector<std::pair<optim::AdamOptions, bool>> cases{
      {{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true}, false},
      {{.lr = 0.02, .weight_decay = 0.05, .amsgrad = true}, true},
      {{.lr = 0.01, .weight_decay = 0.1}, true},
  };
  for (Dtype dt : {kFloat32, kBFloat16}) {
    for (const auto& c : cases) {
      const optim::AdamOptions& o = c.first;
      const bool decoupled = c.second;
      CAPTURE(dt);
      CAPTURE(decoupled);
      CAPTURE(o.amsgrad);
      const Results dense = adam_run(o, decoupled, dt, false, dt), strided = adam_run(o, decoupled, dt, true, dt);
      check_same_keys(dense, strided);
      for (const auto& entry : dense) {
        const std::string& key = entry.first;
        const Tensor& t = entry.second;
        CAPTURE(key);
        CHECK(strided.at(key).dtype() == t.dtype());
        check_close(strided.at(key), t, test::Tolerance{0, 0});  // exact
      }
    }
  }
}

TEST_CASE("the fused CPU Adam kernel skips without advancing the step") {
  manual_seed(4);
  const Tensor p = randn({40000}), g = randn({40000}), m = randn({40000}), v = rand({40000});
  const Tensor step = full({1}, 3.0, kInt64);
  const TensorList before{p.clone(), m.clone(), v.clone()};
  const optim::AdamHyper h{
      .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0, .decoupled = false, .amsgrad = false};
  optim::adam_update_stub(kCPU, p, g, m, v, Tensor(), step, ones({1}), Tensor(), h);
  CHECK(step.item<int64_t>() == 3);
  check_close(p, before[0], {0, 0});
  check_close(m, before[1], {0, 0});
  check_close(v, before[2], {0, 0});
  optim::adam_update_stub(kCPU, p, g, m, v, Tensor(), step, zeros({1}), Tensor(), h);
  CHECK(step.item<int64_t>() == 4);
  check_close(m, before[1] * 0.9 + g * 0.1, {1e-6, 1e-6});
}

TEST_CASE("Adam state_dict round trip keeps moments and per-parameter steps") {
  Tensor p = ones({2}).requires_grad_();
  Tensor q = ones({3}).requires_grad_();
  optim::Adam a({p, q}, {.lr = 0.1, .amsgrad = true});
  p.set_grad(ones({2}));
  a.step();  // q has no gradient: its step count stays 0
  auto sd = a.state_dict();
  CHECK(sd.at("state.0.step").item<int64_t>() == 1);
  CHECK_FALSE(sd.count("state.1.step"));
  CHECK(sd.count("state.0.max_exp_avg_sq"));
  CHECK(sd.at("hp.amsgrad").item<double>() == 1);

  Tensor p2 = ones({2}).requires_grad_(), q2 = ones({3}).requires_grad_();
  optim::Adam b({p2, q2}, {.lr = 0.5});
  b.load_state_dict(sd);
  CHECK(b.lr() == 0.1);
  // The same next step on both gives the same parameters.
  p.set_grad(full({2}, 0.5));
  p2.set_grad(full({2}, 0.5));
  Tensor p_before = p.detach().clone();
  p2.detach().copy_(p_before);
  a.step();
  b.step();
  check_close(p2, p);
  sd["state.7.step"] = scalar_tensor(1, kInt64);
  check_error([&] { b.load_state_dict(sd); }, {"[Adam]", "state.7.step"});
  check_error([] { optim::Adam({ones({1}).requires_grad_()}, {.beta1 = 1.0}); }, {"[Adam]", "beta1"});
}

TEST_CASE("StepLR and CosineAnnealingLR follow PyTorch's schedules") {
  Tensor p = ones({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 5; ++e) {
    lrs.push_back(opt.lr());
    step.step();
  }
  CHECK(lrs == std::vector<double>{1, 1, 0.5, 0.5, 0.25});

  optim::SGD opt2({p}, {.lr = 1.0});
  optim::CosineAnnealingLR cos(opt2, 4);
  const double expected[] = {1.0, 0.8535533905932737, 0.5, 0.14644660940672627, 0.0};
  for (double e : expected) {
    CHECK(opt2.lr() == doctest::Approx(e).epsilon(1e-12));
    cos.step();
  }
  // Resuming a schedule restores the lr of its epoch.
  optim::SGD opt3({p}, {.lr = 1.0});
  optim::CosineAnnealingLR cos3(opt3, 4);
  cos3.load_state_dict(cos.state_dict());
  CHECK(cos3.last_epoch() == 5);
  CHECK(opt3.lr() == doctest::Approx(opt2.lr()));
  check_error([&] { optim::StepLR(opt, 0); }, {"[StepLR]", "step_size"});
}

TEST_CASE("clip_grad_norm_ scales gradients to the max norm and returns the total norm") {
  Tensor a = ones({2}).requires_grad_(), b = ones({1}).requires_grad_(), c = ones({1}).requires_grad_();
  a.set_grad(tensor(std::vector<float>{3, 0}));
  b.set_grad(tensor(std::vector<float>{4}));
  Tensor total = optim::clip_grad_norm_({a, b, c}, 1.0);  // c has no grad: skipped
  CHECK(total.item<float>() == doctest::Approx(5.0));
  const double coef = 1.0 / (5.0 + 1e-6);
  check_close(a.grad(), tensor(std::vector<float>{static_cast<float>(3 * coef), 0}));
  check_close(b.grad(), tensor(std::vector<float>{static_cast<float>(4 * coef)}));
  // Below the max norm nothing changes.
  total = optim::clip_grad_norm_({a, b}, 10.0);
  CHECK(total.item<float>() == doctest::Approx(1.0).epsilon(1e-5));
  check_close(b.grad(), tensor(std::vector<float>{static_cast<float>(4 * coef)}));
  // Infinity norm and a bf16 parameter's gradient.
  Tensor h = ones({2}).to(kBFloat16).requires_grad_();
  h.set_grad(tensor(std::vector<float>{-6, 2}).to(kBFloat16));
  total = optim::clip_grad_norm_({h}, 3.0, optim::kInfNorm);
  CHECK(total.item<float>() == 6.0f);
  check_close(h.grad(), tensor(std::vector<float>{-3, 1}).to(kBFloat16));
  check_error(
      [&] {
        a.set_grad(tensor(std::vector<float>{1, 2}).to(kBFloat16));
      },
      {"[set_grad]", "dtype bfloat16", "float32"});
  a.set_grad(tensor(std::vector<float>{NAN, 1}));
  check_error([&] { optim::clip_grad_norm_({a}, 1.0, 2.0, true); }, {"[clip_grad_norm_]", "nan"});
}

TEST_CASE("the fused float32 Adam kernel: its 16-lane body and its scalar ends give the same bits") {
  // As for SGD: equal inputs, so every output must be equal, over 40 vectors and a 9-value tail.
  const int64_t n = 16 * 40 + 9;
  const auto all_same = [](const Tensor& t) { return hg::test::bitwise_equal(t, t.narrow(0, 0, 1).expand(t.shape())); };
  for (const bool decoupled : {false, true}) {
    for (const bool amsgrad : {false, true}) {
      for (const Dtype copy_dtype : {kFloat32, kBFloat16, kFloat16}) {  // kFloat32: no warm copy
        CAPTURE(decoupled);
        CAPTURE(amsgrad);
        CAPTURE(dtype_name(copy_dtype));
        const optim::AdamHyper h{.lr = 0.013,
                                 .beta1 = 0.9,
                                 .beta2 = 0.999,
                                 .eps = 1e-8,
                                 .weight_decay = 0.031,
                                 .decoupled = decoupled,
                                 .amsgrad = amsgrad};
        const Tensor p = full({n}, 0.7301), m = full({n}, 0.0123), v = full({n}, 0.00457);
        const Tensor vmax = amsgrad ? full({n}, 0.0051) : Tensor(), step = zeros({1}, kInt64);
        const Tensor copy = copy_dtype == kFloat32 ? Tensor() : empty({n}, copy_dtype);
        for (const double grad : {-1.2345, 0.377, 2.5}) {
          optim::adam_update_stub(kCPU, p, full({n}, grad), m, v, vmax, step, Tensor(), copy, h);
          CHECK(all_same(p));
          CHECK(all_same(m));
          CHECK(all_same(v));
          if (amsgrad) CHECK(all_same(vmax));
          if (copy.defined()) CHECK(hg::test::bitwise_equal(copy, p.to(copy_dtype)));
        }
      }
    }
  }
}
