// Warm casts: the fused optimizer step writes each autocast weight's low-precision copy, and the
// next region uses it instead of casting again, bit for bit what a fresh cast gives.

#include "helpers.h"
#include "kernels/cpu/stream_store.h"
#include "optim/warm_cast.h"

using namespace hg;
using hg::test::bitwise_equal;

namespace {

// One step of a two-layer model under autocast; returns the loss (float32).
float train_step(optim::Optimizer& opt, const Tensor& w1, const Tensor& w2, const Tensor& x, Dtype dtype) {
  opt.zero_grad();
  Tensor loss;
  {
    amp::AutocastGuard g(kCPU, dtype);
    loss = mm(relu(mm(x, w1)), w2).to(kFloat32).pow(2.0).mean();
  }
  loss.backward();
  opt.step();
  return loss.item<float>();
}

}  // namespace

TEST_CASE("amp: the optimizer step leaves each autocast weight's cast warm, bit for bit a fresh cast") {
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    for (int which : {0, 1, 2}) {  // SGD with momentum, Adam, AdamW
      CAPTURE(dtype_name(dtype));
      CAPTURE(which);
      manual_seed(3);
      Tensor w1 = (randn({16, 32}) * 0.3).requires_grad_(), w2 = (randn({32, 8}) * 0.3).requires_grad_();
      const Tensor x = randn({4, 16});
      std::unique_ptr<optim::Optimizer> opt;
      if (which == 0)
        opt = std::make_unique<optim::SGD>(TensorList{w1, w2}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      if (which == 1) opt = std::make_unique<optim::Adam>(TensorList{w1, w2}, optim::AdamOptions{.lr = 0.01});
      if (which == 2) opt = std::make_unique<optim::AdamW>(TensorList{w1, w2}, optim::AdamWOptions{.lr = 0.01});
      train_step(*opt, w1, w2, x, dtype);  // the first region casts and marks the weights
      for (const Tensor& w : {w1, w2}) {
        const auto warm = optim::warm_cast_of(w);
        REQUIRE(warm != nullptr);
        CHECK(warm->dtype == dtype);
        REQUIRE(warm->value.defined());  // written by the step
        CHECK(warm->version == w.version());
        CHECK(bitwise_equal(warm->value, w.detach().to(dtype)));
      }
      // The next region reuses it: the cast shares the warm copy's storage and records "to" as before.
      {
        OpRecorder rec;
        amp::AutocastGuard g(kCPU, dtype);
        const Tensor c = amp::cast_for_autocast(w1, dtype);
        CHECK(c.storage() == optim::warm_cast_of(w1)->value.storage());
        CHECK(rec.count("to") == 1);
        CHECK(c.requires_grad());  // still linked to the weight
      }
      // A weight written outside the optimizer is cast afresh.
      {
        NoGradGuard ng;
        w1.mul_(0.5);
      }
      {
        amp::AutocastGuard g(kCPU, dtype);
        const Tensor c = amp::cast_for_autocast(w1, dtype);
        CHECK(c.storage() != optim::warm_cast_of(w1)->value.storage());
        CHECK(bitwise_equal(c, w1.detach().to(dtype)));
      }
    }
  }
}

TEST_CASE("amp: training with warm casts gives the same losses and weights as casting every step") {
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(dtype));
    auto run = [&](bool defeat_warm_casts) {
      manual_seed(5);
      Tensor w1 = (randn({16, 32}) * 0.3).requires_grad_(), w2 = (randn({32, 8}) * 0.3).requires_grad_();
      const Tensor x = randn({4, 16});
      optim::SGD opt({w1, w2}, {.lr = 0.05, .momentum = 0.9});
      std::vector<float> losses;
      for (int step = 0; step < 5; ++step) {
        if (defeat_warm_casts) {
          NoGradGuard ng;
          w1.add_(0.0);  // bumps the version: the next region must cast afresh
          w2.add_(0.0);
        }
        losses.push_back(train_step(opt, w1, w2, x, dtype));
      }
      return std::make_tuple(losses, w1.detach(), w2.detach());
    };
    const auto [warm_losses, warm_w1, warm_w2] = run(false);
    const auto [cold_losses, cold_w1, cold_w2] = run(true);
    CHECK(warm_losses == cold_losses);
    CHECK(bitwise_equal(warm_w1, cold_w1));
    CHECK(bitwise_equal(warm_w2, cold_w2));
  }
}

TEST_CASE("amp: a step skipped by the GradScaler keeps the warm cast valid") {
  manual_seed(6);
  Tensor w = (randn({8, 8}) * 0.3).requires_grad_();
  const Tensor x = randn({2, 8});
  optim::SGD opt({w}, {.lr = 0.1});
  amp::GradScaler scaler(kCPU, {.init_scale = 64.0});  // small enough that clean steps stay finite in float16
  auto step = [&](bool poison) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard g(kCPU, kFloat16);
      loss = mm(x, w).to(kFloat32).sum();
    }
    scaler.scale(loss).backward();
    if (poison) {
      Tensor g = w.grad();
      g.fill_(INFINITY);
    }
    scaler.step(opt);
    scaler.update();
  };
  step(false);
  REQUIRE(scaler.get_scale() == 64.0);  // the first step was not skipped
  const uint32_t version = w.version();
  const Tensor warm = optim::warm_cast_of(w)->value;
  step(true);  // skipped: the weight and its warm copy stay as they are
  CHECK(w.version() == version);
  CHECK(optim::warm_cast_of(w)->value.storage() == warm.storage());
  CHECK(bitwise_equal(optim::warm_cast_of(w)->value, w.detach().to(kFloat16)));
}

TEST_CASE("amp: a weight whose update overflows the cache gets its warm copy by streaming stores, the same bits") {
  // update_and_cast streams the copy once the update moves half the last-level cache (16 bytes
  // a value); an odd row length puts the pool's chunk boundaries off the 64-byte lines.
  const int64_t cols = 1001, rows = hg::cpu::last_level_cache_bytes() / 32 / cols + 1;
  for (Dtype dtype : {kBFloat16, kFloat16}) {
    for (int which : {0, 1}) {  // SGD with momentum, Adam
      CAPTURE(dtype_name(dtype));
      CAPTURE(which);
      manual_seed(7);
      Tensor w = (randn({rows, cols}) * 0.1).requires_grad_();
      std::unique_ptr<optim::Optimizer> opt;
      if (which == 0) opt = std::make_unique<optim::SGD>(TensorList{w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      if (which == 1) opt = std::make_unique<optim::Adam>(TensorList{w}, optim::AdamOptions{.lr = 0.01});
      for (int step = 0; step < 2; ++step) {
        opt->zero_grad();
        {
          amp::AutocastGuard g(kCPU, dtype);
          amp::cast_for_autocast(w, dtype).to(kFloat32).sum().backward();  // marks w, grad of ones
        }
        opt->step();
        const auto warm = optim::warm_cast_of(w);
        REQUIRE(warm != nullptr);
        REQUIRE(warm->value.defined());
        CHECK(warm->version == w.version());
        CHECK(bitwise_equal(warm->value, w.detach().to(dtype)));
      }
    }
  }
}

TEST_CASE("amp: a channels-last weight's cast is kept warm in its layout, bit for bit a fresh cast") {
  manual_seed(12);
  Tensor w = (randn({16, 8, 3, 3}) * 0.2).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  const Tensor x = randn({2, 8, 6, 6}).contiguous(MemoryFormat::ChannelsLast);
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard g(kCPU, kBFloat16);
      loss = conv2d(x, w, Tensor(), {1}, {1}).to(kFloat32).pow(2.0).mean();
    }
    loss.backward();
    opt.step();
  }
  const auto warm = optim::warm_cast_of(w);
  REQUIRE(warm != nullptr);
  REQUIRE(warm->value.defined());
  CHECK(warm->value.strides() == w.strides());
  CHECK(warm->version == w.version());
  CHECK(bitwise_equal(warm->value, w.detach().to(kBFloat16)));
  amp::AutocastGuard g(kCPU, kBFloat16);
  CHECK(amp::cast_for_autocast(w, kBFloat16).storage() == warm->value.storage());
}

TEST_CASE("to_with_result takes a dense value (contiguous or channels-last) and refuses a strided view, by name") {
  const Tensor t = randn({4, 8, 3, 3});
  const Tensor cl = t.to(kBFloat16).contiguous(MemoryFormat::ChannelsLast);
  const Tensor out = to_with_result(t, cl);
  CHECK(out.strides() == cl.strides());
  CHECK(out.storage() == cl.storage());
  const Tensor wide = randn({4, 8, 3, 6}).to(kBFloat16);
  const Tensor view = wide.narrow(3, 0, 3);  // not the whole of its storage
  hg::test::check_error([&] { to_with_result(t, view); }, {"[to]", "must be dense"});
  hg::test::check_error([&] { to_with_result(t, randn({4, 8, 3}).to(kBFloat16)); }, {"[to]", "[4, 8, 3, 3]"});
}
