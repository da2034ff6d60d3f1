// Multi-tensor optimizer updates: the same training run through the per-parameter kernels
// (set_per_param(true), as HG_OPTIM_PER_PARAM=1) and through the multi-tensor ones must leave the
// same bits in every parameter, state tensor and warm cast, whatever the options, groups, dtypes,
// schedule, skipped steps and folded unscale.
#include "framework/ops/optim_update_kernels.h"
#include "helpers.h"
#include "optim/warm_cast.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_error;

namespace {

enum class Kind { Sgd, SgdNesterov, SgdDamped, Adam, AdamAmsgrad, AdamW, AdamWAmsgrad };

// Two groups (the second with a tenth of the lr) over parameters of the sizes the kernels split
// differently: 16-lane bodies and scalar tails, small ones batched over the threads, one past
// kParallelGrain, a strided one (updated through a copy), and float64/bfloat16 ones in lists of
// their own when `mixed`.
std::unique_ptr<optim::Optimizer> make(Kind kind, const TensorList& a, const TensorList& b) {
  const double lr = kind <= Kind::SgdDamped ? 0.05 : 0.01;
  switch (kind) {
    case Kind::Sgd:
      return std::make_unique<optim::SGD>(std::vector<optim::SGDParamGroup>{{a, {.lr = lr}}, {b, {.lr = lr / 10}}});
    case Kind::SgdNesterov:
      return std::make_unique<optim::SGD>(
          std::vector<optim::SGDParamGroup>{{a, {.lr = lr, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
                                            {b, {.lr = lr / 10, .momentum = 0.8, .nesterov = true}}});
    case Kind::SgdDamped:
      return std::make_unique<optim::SGD>(std::vector<optim::SGDParamGroup>{
          {a, {.lr = lr, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.02}}, {b, {.lr = lr / 10}}});
    case Kind::Adam:
      return std::make_unique<optim::Adam>(
          std::vector<optim::AdamParamGroup>{{a, {.lr = lr, .weight_decay = 0.01}}, {b, {.lr = lr / 10}}});
    case Kind::AdamAmsgrad:
      return std::make_unique<optim::Adam>(std::vector<optim::AdamParamGroup>{
          {a, {.lr = lr, .amsgrad = true}}, {b, {.lr = lr / 10, .beta1 = 0.8, .eps = 1e-6, .amsgrad = true}}});
    case Kind::AdamW:
      return std::make_unique<optim::AdamW>(
          std::vector<optim::AdamWParamGroup>{{a, {.lr = lr, .weight_decay = 0.1}}, {b, {.lr = lr / 10}}});
    case Kind::AdamWAmsgrad:
      return std::make_unique<optim::AdamW>(
          std::vector<optim::AdamWParamGroup>{{a, {.lr = lr, .amsgrad = true}}, {b, {.lr = lr / 10, .amsgrad = true}}});
  }
  return nullptr;
}

struct Outcome {
  TensorList params, warm;
  StateDict state;
};

// Six steps with a schedule that changes every group's lr every step; step 2 is vetoed by a
// skip flag when `skip`; with `unscale` (float32 contiguous parameters only) steps fold the
// gradient unscale into the update. `warm_dtype` kFloat32 means no warm casts.
Outcome train(Kind kind, bool per_param, Dtype warm_dtype, bool mixed, bool skip, bool unscale) {
  manual_seed(11);
  std::vector<Shape> shapes_a = {{7}, {16}, {33}, {5, 17}, {40000}, {3, 3}};
  std::vector<Shape> shapes_b = {{100}, {1}, {64, 9}};
  TensorList a, b;
  for (const Shape& s : shapes_a) a.push_back((randn(s) * 0.5).requires_grad_());
  for (const Shape& s : shapes_b) b.push_back((randn(s) * 0.5).requires_grad_());
  if (mixed) {
    a.push_back((randn({8, 6}) * 0.5).t().requires_grad_());  // strided
    a.push_back((randn({50}) * 0.5).to(kFloat64).requires_grad_());
    b.push_back((randn({70}) * 0.5).to(kBFloat16).requires_grad_());
  }
  TensorList all = a;
  all.insert(all.end(), b.begin(), b.end());
  auto opt = make(kind, a, b);
  opt->set_per_param(per_param);
  optim::LambdaLR schedule(*opt, [](int64_t epoch) { return 1.0 / (1.0 + 0.37 * static_cast<double>(epoch)); });
  for (int step = 0; step < 6; ++step) {
    manual_seed(100 + step);
    for (const Tensor& p : all) {
      if (warm_dtype != kFloat32) {  // marks the weight for a warm cast, as a forward under autocast does
        amp::AutocastGuard guard(kCPU, warm_dtype);
        (void)amp::cast_for_autocast(p, warm_dtype);
      }
      // Every 4th parameter has no gradient on odd steps (its step count stays behind).
      const bool none = step % 2 == 1 && (&p - all.data()) % 4 == 3;
      p.set_grad(none ? Tensor() : (randn(p.shape()) * (unscale ? 64.0 : 1.0)).to(p.dtype()));
    }
    if (unscale && step % 3 != 2) {
      REQUIRE(opt->can_step_unscaling());
      opt->step_unscaling(1.0f / 64.0f);
    } else {
      if (unscale)
        for (const Tensor& p : all)
          if (p.grad().defined()) p.grad().mul_(1.0 / 64.0);
      opt->step(skip && step == 2 ? ones({1}) : zeros({1}));
    }
    schedule.step();
  }
  Outcome out{all, {}, opt->state_dict()};
  for (const Tensor& p : all) {
    const auto warm = optim::warm_cast_of(p);
    if (warm_dtype != kFloat32 && p.dtype() == kFloat32 && p.is_contiguous()) {
      REQUIRE(warm != nullptr);  // the run must exercise the warm casts it claims to
      REQUIRE(warm->value.defined());
    }
    out.warm.push_back(warm && warm->value.defined() ? warm->value : Tensor());
  }
  return out;
}

void check_same(const Outcome& x, const Outcome& y) {
  REQUIRE(x.params.size() == y.params.size());
  for (size_t i = 0; i < x.params.size(); ++i) {
    CAPTURE(i);
    CHECK(bitwise_equal(x.params[i].detach(), y.params[i].detach()));
    REQUIRE(x.warm[i].defined() == y.warm[i].defined());
    if (x.warm[i].defined()) CHECK(bitwise_equal(x.warm[i], y.warm[i]));
  }
  REQUIRE(x.state.size() == y.state.size());
  for (const auto& [key, t] : x.state) {
    const std::string& state_key = key;  // clang 14 cannot capture a structured binding
    CAPTURE(state_key);
    REQUIRE(y.state.count(key));
    CHECK(bitwise_equal(t, y.state.at(key)));
  }
}

}  // namespace

TEST_CASE("optim multi-tensor: the same training run gives the per-parameter path's bits") {
  for (Kind kind : {Kind::Sgd, Kind::SgdNesterov, Kind::SgdDamped, Kind::Adam, Kind::AdamAmsgrad, Kind::AdamW,
                    Kind::AdamWAmsgrad}) {
    for (Dtype warm : {kFloat32, kBFloat16, kFloat16}) {
      for (int variant = 0; variant < 3; ++variant) {  // mixed dtypes + skip, float32 + unscale, plain
        CAPTURE(static_cast<int>(kind));
        CAPTURE(dtype_name(warm));
        CAPTURE(variant);
        const bool mixed = variant == 0, skip = variant == 0, unscale = variant == 1;
        const Outcome old_path = train(kind, true, warm, mixed, skip, unscale);
        const Outcome new_path = train(kind, false, warm, mixed, skip, unscale);
        check_same(old_path, new_path);
      }
    }
  }
}

TEST_CASE("optim multi-tensor: a new lr reaches the kernels through the group's hyper tensor") {
  Tensor p = ones({4}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.5});
  p.set_grad(ones({4}));
  opt.step();  // makes the hyper tensor
  opt.set_lr(0.25);
  p.set_grad(ones({4}));
  opt.step();
  CHECK(p.detach().to_vector<float>() == std::vector<float>(4, 0.25f));  // 1 - 0.5 - 0.25
  // load_state_dict rewrites it too.
  optim::SGD other({ones({4}).requires_grad_()}, {.lr = 0.125});
  opt.load_state_dict(other.state_dict());
  p.set_grad(ones({4}));
  opt.step();
  CHECK(p.detach().to_vector<float>() == std::vector<float>(4, 0.125f));
  CHECK(opt.lr() == 0.125);
}

TEST_CASE("optim multi-tensor: the stubs honour the skip flag and check their lists") {
  const Tensor p = full({20}, 1.0), g = full({20}, 2.0), buf = zeros({20}), ready = zeros({1}, kInt32);
  const Tensor cast = empty({20}, kBFloat16);
  const Tensor hyper = tensor(std::vector<double>{0.1, 0.9, 0.0, 0.0});
  optim::sgd_multi_update_stub(kCPU, {p}, {g}, {buf}, {ready}, ones({1}), {cast}, hyper, false, 0.0f);
  CHECK(p.to_vector<float>() == std::vector<float>(20, 1.0f));  // skipped: unchanged, cast still written
  CHECK(bitwise_equal(cast, p.to(kBFloat16)));
  CHECK(ready.item<int32_t>() == 0);
  optim::sgd_multi_update_stub(kCPU, {p}, {g}, {buf}, {ready}, zeros({1}), {cast}, hyper, false, 0.0f);
  CHECK(p.to_vector<float>() == std::vector<float>(20, 1.0f - 0.1f * 2.0f));
  CHECK(ready.item<int32_t>() == 1);

  const Tensor step = zeros({1}, kInt64), m = zeros({20}), v = zeros({20});
  const Tensor ahyper = tensor(std::vector<double>{0.1, 0.9, 0.999, 1e-8, 0.0});
  optim::adam_multi_update_stub(kCPU, {p}, {g}, {m}, {v}, {}, {step}, ones({1}), {Tensor()}, ahyper, false, 0.0f);
  CHECK(step.item<int64_t>() == 0);  // a skipped step does not count

  check_error([&] { optim::sgd_multi_update_stub(kCPU, {p}, {}, {}, {}, Tensor(), {Tensor()}, hyper, false, 0.0f); },
              {"SGD"});
  check_error([&] { optim::sgd_multi_update_stub(kCPU, {p}, {g}, {}, {}, Tensor(), {Tensor()}, ahyper, false, 0.0f); },
              {"SGD"});
  check_error(
      [&] {
        optim::sgd_multi_update_stub(kCPU, {p}, {g.to(kFloat64)}, {}, {}, Tensor(), {Tensor()}, hyper, false, 0.0f);
      },
      {"SGD"});
  check_error(
      [&] {
        optim::adam_multi_update_stub(kCPU, {p}, {g}, {m}, {}, {}, {step}, Tensor(), {Tensor()}, ahyper, false, 0.0f);
      },
      {"Adam"});
  check_error(
      [&] {
        optim::adam_multi_update_stub(kCPU, {p}, {g}, {m}, {v}, {}, {zeros({1})}, Tensor(), {Tensor()}, ahyper, false,
                                      0.0f);
      },
      {"Adam"});
}
