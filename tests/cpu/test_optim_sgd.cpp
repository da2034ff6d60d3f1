// SGD against hand-computed PyTorch updates; the skip flag; state_dict round trip.
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
