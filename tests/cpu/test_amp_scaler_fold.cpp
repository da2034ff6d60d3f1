// GradScaler::step's fast path on the CPU: kernels that widen 16-bit gradients note whether every
// value is finite (internal::note_all_finite), and the optimizer takes the unscale into its update
// (Optimizer::step_unscaling). Both must leave exactly what unscale_ then step() leave.
#include <cmath>
#include <limits>

#include "amp/scaler_ops.h"
#include "framework/ops/internal.h"
#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_error;

namespace {
bool all_finite_values(const Tensor& t) {
  for (float v : t.to(kFloat32).to_vector<float>())
    if (!std::isfinite(v)) return false;
  return true;
}

// t (float16 or bfloat16) widened value by value through hg::Half / hg::BFloat16.
Tensor widened_by_element(const Tensor& t) {
  std::vector<float> out;
  if (t.dtype() == kFloat16) {
    for (Half h : t.to_vector<Half>()) out.push_back(static_cast<float>(h));
  } else {
    for (BFloat16 h : t.to_vector<BFloat16>()) out.push_back(static_cast<float>(h));
  }
  return tensor(out);
}

// A two-layer model whose parameters are copies of `from`'s (the same values, its own tensors).
struct Model {
  Tensor w1, b1, w2, b2;
  Model(int64_t in, int64_t hidden, int64_t out) {
    w1 = (randn({hidden, in}) * 0.1).detach().requires_grad_();
    b1 = (randn({hidden}) * 0.1).detach().requires_grad_();
    w2 = (randn({out, hidden}) * 0.1).detach().requires_grad_();
    b2 = (randn({out}) * 0.1).detach().requires_grad_();
  }
  Model(const Model& from)
      : w1(from.w1.detach().clone().requires_grad_()),
        b1(from.b1.detach().clone().requires_grad_()),
        w2(from.w2.detach().clone().requires_grad_()),
        b2(from.b2.detach().clone().requires_grad_()) {}
  TensorList params() const { return {w1, b1, w2, b2}; }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    amp::AutocastGuard autocast(kCPU, kFloat16);
    return cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), y);
  }
};
}  // namespace

TEST_CASE("amp: widening a 16-bit tensor to float32 notes whether it is all finite, until it is written") {
  for (Dtype d : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    // 37 values: two 16-lane blocks and a tail; the bad value in a block, then in the tail.
    const Tensor clean = randn({37}).to(d);
    Tensor wide = clean.to(kFloat32);
    CHECK(internal::known_all_finite(wide));
    CHECK(bitwise_equal(wide, widened_by_element(clean)));
    for (const int64_t at : {5, 36}) {
      for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        CAPTURE(at);
        Tensor dirty = clean.clone();
        dirty.index_put_({at}, static_cast<double>(bad));
        const Tensor w = dirty.to(kFloat32);
        CHECK_FALSE(internal::known_all_finite(w));
        CHECK(bitwise_equal(w, widened_by_element(dirty)));
      }
    }
    // A view is not the whole storage; an in-place write makes the note stale.
    CHECK_FALSE(internal::known_all_finite(wide.slice(0, 0, 10)));
    wide.mul_(2.0);
    CHECK_FALSE(internal::known_all_finite(wide));
  }
  // Narrowing claims nothing, and neither does an untouched float32 tensor.
  CHECK_FALSE(internal::known_all_finite(randn({8}).to(kFloat16)));
  CHECK_FALSE(internal::known_all_finite(randn({8})));
}

TEST_CASE("amp: linear's widened weight gradient is noted all finite exactly when it is, on each kernel path") {
  // Batch 8 takes the short-inner kernel, 40 and 128 the packed or narrow ones (and oneDNN's
  // product then its widening for bfloat16 on CPUs with bfloat16 units). A large upstream
  // gradient overflows the 16-bit product: then the gradient holds inf and must not be noted.
  manual_seed(7);
  for (Dtype d : {kFloat16, kBFloat16}) {
    for (const int64_t batch : {8, 40, 128}) {
      for (const double upstream_scale : {1.0, d == kFloat16 ? 1e5 : 1e38}) {
        CAPTURE(dtype_name(d));
        CAPTURE(batch);
        CAPTURE(upstream_scale);
        Tensor w = (randn({70, 90}) * 0.1).detach().requires_grad_();
        const Tensor x = randn({batch, 90}) * 10.0, upstream = randn({batch, 70}) * upstream_scale;
        Tensor loss;
        {
          amp::AutocastGuard g(kCPU, d);
          loss = (linear(x, w).to(kFloat32) * upstream).sum();
        }
        loss.backward();
        const bool finite = all_finite_values(w.grad());
        CHECK(finite == (upstream_scale == 1.0));
        CHECK(internal::known_all_finite(w.grad()) == finite);
      }
    }
  }
}

namespace {
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const TensorList&)>;

// Trains `a` with scaler.step() alone (the folded path) and `b` with unscale_() then step() (the
// path with the unscale as a pass of its own), the same batches, and checks after every step that
// parameters, gradients, optimizer state and scale agree bit for bit. Step 2's batch overflows.
void check_fold_matches_unscale_then_step(const MakeOptimizer& make) {
  manual_seed(3);
  const Model a(20, 24, 5);
  const Model b(a);
  auto opt_a = make(a.params()), opt_b = make(b.params());
  const amp::GradScalerOptions options{.init_scale = 1024.0, .growth_interval = 2};
  amp::GradScaler scaler_a(kCPU, options), scaler_b(kCPU, options);
  for (int step = 0; step < 5; ++step) {
    CAPTURE(step);
    const Tensor x = randn({16, 20}) * (step == 2 ? 1e5 : 1.0), y = randint(0, 5, {16});
    opt_a->zero_grad();
    opt_b->zero_grad();
    scaler_a.scale(a.loss(x, y)).backward();
    scaler_b.scale(b.loss(x, y)).backward();
    OpRecorder rec;
    scaler_a.step(*opt_a);
    // Every clean gradient came from a widening that noted it: none is read again, and no
    // separate unscale pass runs. Step 2's are not all finite: read, found, unscaled, skipped.
    CHECK(rec.count("amp_find_non_finite") == (step == 2 ? 1u : 0u));
    CHECK(rec.count("amp_unscale_") == (step == 2 ? 1u : 0u));
    scaler_b.unscale_(*opt_b);
    scaler_b.step(*opt_b);
    scaler_a.update();
    scaler_b.update();
    CHECK(scaler_a.get_scale() == scaler_b.get_scale());
    const TensorList pa = a.params(), pb = b.params();
    for (size_t i = 0; i < pa.size(); ++i) {
      CAPTURE(i);
      CHECK(bitwise_equal(pa[i], pb[i]));
      CHECK(bitwise_equal(pa[i].grad(), pb[i].grad()));
    }
    const StateDict sa = opt_a->state_dict(), sb = opt_b->state_dict();
    REQUIRE(sa.size() == sb.size());
    for (const auto& entry : sa) {  // (no structured binding: clang 14 cannot capture one)
      const std::string& key = entry.first;
      const Tensor& t = entry.second;
      CAPTURE(key);
      REQUIRE(sb.count(key));
      if (t.dtype() == kFloat32)
        CHECK(bitwise_equal(t, sb.at(key)));
      else
        CHECK(t.to(kFloat64).to_vector<double>() == sb.at(key).to(kFloat64).to_vector<double>());
    }
  }
  // The overflowing step was skipped and backed off: 1024 grew at steps 1 and 4, halved at 2.
  CHECK(scaler_a.get_scale() == 2048.0);
}
}  // namespace

TEST_CASE("amp: GradScaler::step with the unscale folded into SGD and Adam(W) matches unscale_ then step bit for bit") {
  SUBCASE("SGD, momentum, nesterov, weight decay") {
    check_fold_matches_unscale_then_step([](const TensorList& p) {
      return std::make_unique<optim::SGD>(
          p, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
    });
  }
  SUBCASE("SGD, plain") {
    check_fold_matches_unscale_then_step(
        [](const TensorList& p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.05}); });
  }
  SUBCASE("Adam with amsgrad") {
    check_fold_matches_unscale_then_step([](const TensorList& p) {
      return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-3, .weight_decay = 1e-2, .amsgrad = true});
    });
  }
  SUBCASE("AdamW") {
    check_fold_matches_unscale_then_step([](const TensorList& p) {
      return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-3, .weight_decay = 1e-2});
    });
  }
}

TEST_CASE("amp: GradScaler::step reads again a gradient written after backward, and skips on its inf") {
  manual_seed(5);
  const Model m(12, 16, 4);
  optim::SGD opt(m.params(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler(kCPU, {.init_scale = 256.0});
  const Tensor x = randn({8, 12}), y = randint(0, 4, {8});
  scaler.scale(m.loss(x, y)).backward();
  const Tensor before = m.w1.detach().clone();
  // In place, through an op: the note on w1's gradient is stale, so step() checks it again.
  Tensor g = m.w1.grad();
  g.index_put_({0, 0}, std::numeric_limits<double>::infinity());
  const float scaled = g.to_vector<float>()[1];
  OpRecorder rec;
  scaler.step(opt);
  CHECK(rec.count("amp_find_non_finite") == 1);
  scaler.update();
  CHECK(bitwise_equal(m.w1, before));
  CHECK(scaler.get_scale() == 128.0);
  // Skipped, the gradients are unscaled all the same, as unscale_ leaves them.
  CHECK(std::isinf(m.w1.grad().to_vector<float>()[0]));
  CHECK(m.w1.grad().to_vector<float>()[1] == scaled * (1.0f / 256.0f));
}

TEST_CASE("optim: step_unscaling multiplies each gradient inside the update, and refuses what it cannot fuse") {
  manual_seed(9);
  Tensor p = randn({33}).requires_grad_(), q = p.detach().clone().requires_grad_();
  const Tensor grad = randn({33}) * 512.0;
  p.set_grad(grad.clone());
  q.set_grad(grad.clone());
  optim::SGD a({p}, {.lr = 0.1, .momentum = 0.5}), b({q}, {.lr = 0.1, .momentum = 0.5});
  REQUIRE(a.can_step_unscaling());
  const uint32_t version = p.grad().version();
  a.step_unscaling(1.0f / 512.0f);
  {
    NoGradGuard no_grad;
    Tensor(q.grad()).mul_(1.0 / 512.0);
  }
  b.step();
  CHECK(bitwise_equal(p, q));
  CHECK(bitwise_equal(p.grad(), q.grad()));
  CHECK(p.grad().version() != version);  // written in place: a note on it would be stale
  CHECK(a.steps() == 1);
  check_error([&] { a.step_unscaling(0.0f); }, {"SGD", "inv_scale must be finite and > 0"});

  // float64 parameters, strided parameters and gradients, and a gradient of another dtype fall
  // back to unscale_ then step.
  Tensor d = randn({4}, TensorOptions(kFloat64)).requires_grad_();
  d.set_grad(randn({4}, TensorOptions(kFloat64)));
  optim::SGD sd({d}, {.lr = 0.1});
  CHECK_FALSE(sd.can_step_unscaling());
  check_error([&] { sd.step_unscaling(0.5f); }, {"SGD", "step_unscaling needs"});
  Tensor s = randn({3, 4}).t().detach().requires_grad_();
  s.set_grad(randn({4, 3}));
  optim::Adam ss({s}, {.lr = 0.1});
  CHECK_FALSE(ss.can_step_unscaling());
  Tensor c = randn({4, 3}).requires_grad_();
  c.set_grad(randn({3, 4}).t());
  optim::Adam sc({c}, {.lr = 0.1});
  CHECK_FALSE(sc.can_step_unscaling());
}

TEST_CASE("amp: amp_find_non_finite reads without writing, and refuses what it cannot read") {
  Tensor found = zeros({1});
  const Tensor clean = randn({40});
  Tensor dirty = randn({3, 7});
  dirty.index_put_({2, 6}, std::numeric_limits<double>::quiet_NaN());
  const Tensor before = dirty.clone();
  amp::find_non_finite({clean}, found);
  CHECK(found.item<float>() == 0.0f);
  amp::find_non_finite({clean, dirty}, found);
  CHECK(found.item<float>() == 1.0f);
  CHECK(bitwise_equal(dirty, before));
  check_error([&] { amp::find_non_finite({clean}, Tensor()); }, {"amp_find_non_finite", "found_inf is undefined"});
  check_error([&] { amp::find_non_finite({clean}, zeros({2})); }, {"amp_find_non_finite", "one-element float32"});
  check_error([&] { amp::find_non_finite({dirty.t()}, found); }, {"amp_find_non_finite", "contiguous"});
  check_error([&] { amp::find_non_finite({ones({3}, TensorOptions(kInt64))}, found); },
              {"amp_find_non_finite", "floating-point"});
}
