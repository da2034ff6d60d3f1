// Parameter groups (each its own lr and options, as PyTorch's param_groups) and the schedulers
// that drive each group's lr: LinearLR, OneCycleLR, SequentialLR against PyTorch's sequences.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {

// Two groups with lrs 0.1 and 0.01 (as the PyTorch runs below), stepped `steps` times; returns
// the lrs of both groups before each step.
template <class MakeScheduler>
std::vector<std::vector<double>> lr_sequence(int steps, MakeScheduler make) {
  Tensor a = ones({1}).requires_grad_(), b = ones({1}).requires_grad_();
  optim::SGD opt({{{a}, {.lr = 0.1, .momentum = 0.9}}, {{b}, {.lr = 0.01, .momentum = 0.9}}});
  auto scheduler = make(opt);
  std::vector<std::vector<double>> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back({opt.lr(0), opt.lr(1)});
    scheduler->step();
  }
  return out;
}

void check_sequence(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    for (size_t g = 0; g < 2; ++g) CHECK(got[i][g] == doctest::Approx(want[i][g]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("parameter groups: each group steps with its own lr and options, as separate optimizers would") {
  manual_seed(21);
  const Tensor w0 = randn({3, 4}), b0 = randn({4}), grad_w = randn({3, 4}), grad_b = randn({4});
  for (int which : {0, 1}) {  // SGD, AdamW
    CAPTURE(which);
    Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor w_ref = w0.clone().requires_grad_(), b_ref = b0.clone().requires_grad_();
    std::unique_ptr<optim::Optimizer> grouped, ref_w, ref_b;
    if (which == 0) {
      grouped = std::make_unique<optim::SGD>(std::vector<optim::SGDParamGroup>{
          {{w}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}}, {{b}, {.lr = 0.5}}});
      ref_w = std::make_unique<optim::SGD>(TensorList{w_ref},
                                           optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      ref_b = std::make_unique<optim::SGD>(TensorList{b_ref}, optim::SGDOptions{.lr = 0.5});
    } else {
      grouped = std::make_unique<optim::AdamW>(std::vector<optim::AdamWParamGroup>{
          {{w}, {.lr = 1e-2, .weight_decay = 0.1}}, {{b}, {.lr = 3e-2, .weight_decay = 0.0}}});
      ref_w = std::make_unique<optim::AdamW>(TensorList{w_ref}, optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
      ref_b = std::make_unique<optim::AdamW>(TensorList{b_ref}, optim::AdamWOptions{.lr = 3e-2, .weight_decay = 0.0});
    }
    CHECK(grouped->num_param_groups() == 2);
    for (int step = 0; step < 3; ++step) {
      w.set_grad(grad_w * (step + 1.0));
      b.set_grad(grad_b * (step + 1.0));
      w_ref.set_grad(grad_w * (step + 1.0));
      b_ref.set_grad(grad_b * (step + 1.0));
      grouped->step();
      ref_w->step();
      ref_b->step();
    }
    check_close(w.detach(), w_ref.detach(), {0, 0});
    check_close(b.detach(), b_ref.detach(), {0, 0});
  }
}

TEST_CASE("parameter groups: add_param_group, options per group, state_dict round trip, bad groups") {
  Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_(), c = ones({1}).requires_grad_();
  optim::Adam opt({a}, {.lr = 1e-3});
  opt.add_param_group({{b, c}, {.lr = 5e-3, .beta1 = 0.8}});
  CHECK(opt.num_param_groups() == 2);
  CHECK(opt.params().size() == 3);
  CHECK(opt.group_of(2) == 1);
  CHECK(opt.group_params(1).size() == 2);
  CHECK(opt.options(1).beta1 == 0.8);
  CHECK(opt.options(1).lr == 5e-3);
  opt.set_lr(1, 7e-3);
  CHECK(opt.options(1).lr == 7e-3);
  CHECK(opt.lr(0) == 1e-3);
  for (Tensor* t : {&a, &b, &c}) t->set_grad(ones_like(t->detach()));
  opt.step();
  const StateDict sd = opt.state_dict();
  CHECK(sd.count("group.1.lr") == 1);
  CHECK(sd.count("group.1.hp.beta1") == 1);
  Tensor a2 = ones({2}).requires_grad_(), b2 = ones({3}).requires_grad_(), c2 = ones({1}).requires_grad_();
  optim::Adam restored({{{a2}, {}}, {{b2, c2}, {}}});
  restored.load_state_dict(sd);
  CHECK(restored.lr(1) == 7e-3);
  CHECK(restored.options(1).beta1 == 0.8);
  // A one-group optimizer cannot take a two-group checkpoint, nor the other way round.
  optim::Adam one({ones({2}).requires_grad_()});
  check_error([&] { one.load_state_dict(sd); }, {"[Adam]", "load_state_dict"});
  optim::Adam two({{{ones({2}).requires_grad_()}, {}}, {{ones({3}).requires_grad_(), ones({1}).requires_grad_()}, {}}});
  check_error([&] { two.load_state_dict(one.state_dict()); }, {"[Adam]", "group.1.lr"});
  // A parameter in two groups, twice in one group, or a bad group option.
  check_error([&] { opt.add_param_group({{a}, {}}); }, {"[Adam]", "already in group 0"});
  check_error([&] { optim::SGD(std::vector<optim::SGDParamGroup>{{{a, a}, {}}}); }, {"[SGD]", "listed twice"});
  check_error([&] { optim::SGD({{{a}, {}}, {{b}, {.momentum = -1}}}); }, {"[SGD]", "momentum"});
  check_error([&] { optim::SGD(std::vector<optim::SGDParamGroup>{}); }, {"[SGD]", "at least one"});
  check_error([&] { opt.set_lr(5, 0.1); }, {"[Adam]", "no parameter group 5"});
}

TEST_CASE("LinearLR warms each group up from its own lr, as PyTorch") {
  // PyTorch 1.13: SGD with groups lr 0.1 / 0.01, LinearLR(start_factor=0.25, end_factor=1.0,
  // total_iters=4), group lrs before each of 7 steps.
  check_sequence(lr_sequence(7, [](optim::Optimizer& o) { return std::make_unique<optim::LinearLR>(o, 0.25, 1.0, 4); }),
                 {{0.025, 0.0025},
                  {0.043750000000000004, 0.004375},
                  {0.06250000000000001, 0.00625},
                  {0.08125000000000002, 0.008125},
                  {0.10000000000000002, 0.01},
                  {0.10000000000000002, 0.01},
                  {0.10000000000000002, 0.01}});
  Tensor p = ones({1}).requires_grad_();
  optim::SGD opt({p});
  check_error([&] { optim::LinearLR(opt, 0.0); }, {"[LinearLR]", "start_factor"});
  check_error([&] { optim::LinearLR(opt, 0.5, 1.0, 0); }, {"[LinearLR]", "total_iters"});
}

TEST_CASE("OneCycleLR follows PyTorch's cosine and linear (three-phase) cycles") {
  // PyTorch 1.13: OneCycleLR(max_lr=[1.0, 0.5], total_steps=10, pct_start=0.3, cycle_momentum=False).
  check_sequence(lr_sequence(10,
                             [](optim::Optimizer& o) {
                               return std::make_unique<optim::OneCycleLR>(o, std::vector<double>{1.0, 0.5},
                                                                          optim::OneCycleOptions{.total_steps = 10});
                             }),
                 {{0.040000000000000036, 0.020000000000000018},
                  {0.52, 0.26},
                  {1.0, 0.5},
                  {0.9504846320134737, 0.47524231600673683},
                  {0.8117456539497631, 0.40587282697488153},
                  {0.6112620219362893, 0.30563101096814466},
                  {0.38874197806371075, 0.19437098903185537},
                  {0.18825834605023697, 0.09412917302511849},
                  {0.049519367986526286, 0.024759683993263143},
                  {4e-06, 2e-06}});
  // PyTorch 1.13: OneCycleLR(max_lr=2.0, total_steps=12, pct_start=0.25, anneal_strategy='linear',
  // three_phase=True, div_factor=10, final_div_factor=100, cycle_momentum=False).
  const optim::OneCycleOptions three{.total_steps = 12,
                                     .pct_start = 0.25,
                                     .anneal_strategy = optim::Anneal::Linear,
                                     .div_factor = 10,
                                     .final_div_factor = 100,
                                     .three_phase = true};
  const std::vector<double> want = {0.2,
                                    1.1,
                                    2.0,
                                    1.1,
                                    0.19999999999999996,
                                    0.17171428571428574,
                                    0.14342857142857143,
                                    0.11514285714285716,
                                    0.08685714285714287,
                                    0.05857142857142858,
                                    0.030285714285714305,
                                    0.0020000000000000018};
  std::vector<std::vector<double>> both;
  for (double v : want) both.push_back({v, v});
  check_sequence(
      lr_sequence(12, [&](optim::Optimizer& o) { return std::make_unique<optim::OneCycleLR>(o, 2.0, three); }), both);
  // Stepping past total_steps, and bad settings.
  Tensor p = ones({1}).requires_grad_();
  optim::SGD opt({p});
  optim::OneCycleLR short_cycle(opt, 1.0, {.total_steps = 2});
  short_cycle.step();
  short_cycle.step();
  check_error([&] { short_cycle.step(); }, {"[OneCycleLR]", "stepped 3 times, but total_steps is 2"});
  check_error([&] { optim::OneCycleLR(opt, 1.0, {}); }, {"[OneCycleLR]", "total_steps"});
  check_error(
      [&] {
        optim::OneCycleLR(opt, std::vector<double>{1.0, 2.0}, {.total_steps = 5});
      },
      {"[OneCycleLR]", "2 max_lrs for 1 parameter groups"});
}

TEST_CASE("SequentialLR: warm-up then cosine, as PyTorch") {
  // PyTorch 1.13: SequentialLR([LinearLR(start_factor=0.1, total_iters=3), CosineAnnealingLR(T_max=6,
  // eta_min=0.001)], milestones=[3]) on groups with lr 0.1 / 0.01.
  std::vector<std::unique_ptr<optim::LRScheduler>> keep;
  check_sequence(lr_sequence(10,
                             [&](optim::Optimizer& o) {
                               keep.clear();
                               keep.push_back(std::make_unique<optim::LinearLR>(o, 0.1, 1.0, 3));
                               keep.push_back(std::make_unique<optim::CosineAnnealingLR>(o, 6, 0.001));
                               return std::make_unique<optim::SequentialLR>(
                                   o, std::vector<optim::LRScheduler*>{keep[0].get(), keep[1].get()},
                                   std::vector<int64_t>{3});
                             }),
                 {{0.010000000000000002, 0.001},
                  {0.04, 0.003999999999999999},
                  {0.07, 0.006999999999999998},
                  {0.1, 0.010000000000000002},
                  {0.09336825748732973, 0.009397114317029977},
                  {0.07525000000000001, 0.007750000000000002},
                  {0.0505, 0.0055000000000000005},
                  {0.025750000000000012, 0.003250000000000001},
                  {0.007631742512670284, 0.0016028856829700259},
                  {0.001, 0.001}});
  Tensor p = ones({1}).requires_grad_();
  optim::SGD opt({p});
  optim::LinearLR warm(opt);
  optim::CosineAnnealingLR cos(opt, 4);
  check_error([&] { optim::SequentialLR(opt, {&warm, &cos}, {}); }, {"[SequentialLR]", "0 milestones for 2"});
  check_error([&] { optim::SequentialLR(opt, {&warm, &cos}, {0}); }, {"[SequentialLR]", "positive and increasing"});
}

TEST_CASE("schedulers keep one base lr per group through state_dict") {
  Tensor a = ones({1}).requires_grad_(), b = ones({1}).requires_grad_();
  optim::SGD opt({{{a}, {.lr = 1.0}}, {{b}, {.lr = 0.5}}});
  optim::StepLR step(opt, 1, 0.5);
  step.step();
  step.step();
  CHECK(opt.lr(0) == 0.25);
  CHECK(opt.lr(1) == 0.125);
  const StateDict sd = step.state_dict();
  CHECK(sd.count("base_lr.1") == 1);
  optim::SGD opt2({{{ones({1}).requires_grad_()}, {.lr = 9.0}}, {{ones({1}).requires_grad_()}, {.lr = 9.0}}});
  optim::StepLR resumed(opt2, 1, 0.5);
  resumed.load_state_dict(sd);
  CHECK(opt2.lr(0) == 0.25);
  CHECK(opt2.lr(1) == 0.125);
  optim::SGD single({ones({1}).requires_grad_()});
  optim::StepLR other(single, 1);
  check_error([&] { other.load_state_dict(sd); }, {"[StepLR]", "3 entries for 1 parameter groups"});
}
