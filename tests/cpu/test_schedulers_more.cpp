// MultiStepLR, ExponentialLR, LambdaLR and ReduceLROnPlateau against the learning rates PyTorch
// 1.13 gives on SGD(lr=0.1) (optimizer.step() then scheduler.step() each epoch), and their state
// dicts round-tripped.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_error;

namespace {
// lr before the first step, then after each scheduler step.
template <class Step>
std::vector<double> lrs(optim::Optimizer& opt, int steps, Step step) {
  std::vector<double> out{opt.lr()};
  for (int i = 0; i < steps; ++i) {
    opt.step();
    step(i);
    out.push_back(opt.lr());
  }
  return out;
}
void check_lrs(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }
}
}  // namespace

TEST_CASE("MultiStepLR, ExponentialLR and LambdaLR follow PyTorch's rates") {
  Tensor p = zeros({1}).requires_grad_(true);
  p.set_grad(zeros({1}));
  {
    optim::SGD opt({p}, {.lr = 0.1});
    optim::MultiStepLR s(opt, {2, 5, 5}, 0.5);  // MultiStepLR(opt, [2, 5, 5], 0.5): 5 listed twice counts twice
    check_lrs(lrs(opt, 8, [&](int) { s.step(); }), {0.1, 0.1, 0.05, 0.05, 0.05, 0.0125, 0.0125, 0.0125, 0.0125});
  }
  {
    optim::SGD opt({p}, {.lr = 0.1});
    optim::ExponentialLR s(opt, 0.9);
    check_lrs(lrs(opt, 8, [&](int) { s.step(); }),
              {0.1, 0.09000000000000001, 0.08100000000000002, 0.07290000000000002, 0.06561000000000002,
               0.05904900000000002, 0.05314410000000002, 0.04782969000000002, 0.043046721000000024});
  }
  {
    optim::SGD opt({p}, {.lr = 0.1});
    optim::LambdaLR s(opt, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
    check_lrs(lrs(opt, 8, [&](int) { s.step(); }),
              {0.1, 0.05, 0.03333333333333333, 0.025, 0.020000000000000004, 0.016666666666666666, 0.014285714285714285,
               0.0125, 0.011111111111111112});
    // The state dict round trip: a fresh scheduler resumes at the saved epoch.
    optim::SGD opt2({p}, {.lr = 0.1});
    optim::LambdaLR s2(opt2, [](int64_t e) { return 1.0 / static_cast<double>(e + 1); });
    s2.load_state_dict(s.state_dict());
    CHECK(s2.last_epoch() == 8);
    CHECK(opt2.lr() == doctest::Approx(0.011111111111111112));
  }
  {
    // One function per group: LambdaLR(opt, [lambda e: 0.5 ** e, lambda e: 1 + e]) on groups of lr 0.1 and 0.01.
    Tensor q = zeros({1}).requires_grad_(true);
    optim::SGD opt({{{p}, {.lr = 0.1}}, {{q}, {.lr = 0.01}}});
    optim::LambdaLR s(opt, {[](int64_t e) { return std::pow(0.5, static_cast<double>(e)); },
                            [](int64_t e) { return 1.0 + static_cast<double>(e); }});
    for (int i = 0; i < 3; ++i) opt.step(), s.step();
    CHECK(opt.lr(0) == doctest::Approx(0.0125));
    CHECK(opt.lr(1) == doctest::Approx(0.04));
    check_error(
        [&] {
          optim::LambdaLR(opt, {[](int64_t) { return 1.0; }, [](int64_t) { return 1.0; }, [](int64_t) { return 1.0; }});
        },
        {"[LambdaLR]", "3 lr_lambdas for 2 parameter groups"});
  }
}

TEST_CASE("ReduceLROnPlateau follows PyTorch's rates, in both modes and threshold modes") {
  Tensor p = zeros({1}).requires_grad_(true);
  p.set_grad(zeros({1}));
  {
    // ReduceLROnPlateau(opt, patience=1, factor=0.5, cooldown=1) on these metrics.
    const std::vector<double> m = {1.0, 0.9, 0.95, 0.95, 0.91, 0.8, 0.85, 0.86, 0.87, 0.88, 0.89, 0.7};
    optim::SGD opt({p}, {.lr = 0.1});
    optim::ReduceLROnPlateau s(opt, {.factor = 0.5, .patience = 1, .cooldown = 1});
    check_lrs(lrs(opt, 12, [&](int i) { s.step(m[static_cast<size_t>(i)]); }),
              {0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125});
    CHECK(s.best() == 0.7);
  }
  {
    // ReduceLROnPlateau(opt, mode='max', patience=0, factor=0.1, threshold=0.05, threshold_mode='abs', min_lr=0.002).
    using O = optim::ReduceLROnPlateauOptions;
    const std::vector<double> m = {1, 1.04, 1.2, 1.1, 1.2, 1.3};
    optim::SGD opt({p}, {.lr = 0.1});
    optim::ReduceLROnPlateau s(opt, {.mode = O::Mode::Max,
                                     .factor = 0.1,
                                     .patience = 0,
                                     .threshold = 0.05,
                                     .threshold_mode = O::Threshold::Abs,
                                     .min_lr = 0.002});
    check_lrs(lrs(opt, 6, [&](int i) { s.step(m[static_cast<size_t>(i)]); }),
              {0.1, 0.1, 0.010000000000000002, 0.010000000000000002, 0.002, 0.002, 0.002});
  }
}

TEST_CASE("ReduceLROnPlateau: state dict round trip (best is inf before any metric), bad options and states") {
  Tensor p = zeros({1}).requires_grad_(true);
  optim::SGD opt({p}, {.lr = 0.1});
  optim::ReduceLROnPlateau fresh(opt);
  optim::ReduceLROnPlateau copy(opt);
  copy.load_state_dict(fresh.state_dict());
  CHECK(std::isinf(copy.best()));
  optim::ReduceLROnPlateau s(opt, {.patience = 2});
  for (double m : {1.0, 2.0, 3.0}) s.step(m);
  optim::ReduceLROnPlateau r(opt, {.patience = 2});
  r.load_state_dict(s.state_dict());
  CHECK(r.best() == 1.0);
  CHECK(r.num_bad_epochs() == 2);
  CHECK(r.last_epoch() == 3);
  r.step(4.0);  // the third bad epoch in a row: the lr drops, as s's would
  CHECK(opt.lr() == doctest::Approx(0.01));
  check_error([&] { optim::ReduceLROnPlateau(opt, {.factor = 1.0}); }, {"[ReduceLROnPlateau]", "factor"});
  StateDict bad = s.state_dict();
  bad["num_bad_epochs"] = scalar_tensor(-1.0);
  check_error([&] { r.load_state_dict(bad); }, {"[ReduceLROnPlateau]", "num_bad_epochs"});
  bad.erase("best");
  check_error([&] { r.load_state_dict(bad); }, {"[ReduceLROnPlateau]", "best"});
  check_error([&] { optim::MultiStepLR(opt, {-1}); }, {"[MultiStepLR]", "milestones"});
  check_error([&] { optim::ExponentialLR(opt, NAN); }, {"[ExponentialLR]", "gamma"});
  check_error([&] { optim::LambdaLR(opt, [](int64_t) { return -1.0; }); }, {"[LambdaLR]", "learning rate"});
}
