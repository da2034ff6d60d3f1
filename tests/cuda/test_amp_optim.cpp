// GradScaler and the fused optimizers on CUDA: unscale + found_inf, scale backoff/growth, SGD and
// Adam/AdamW against the CPU path, parameters bit for bit unchanged when found_inf is set, and an
// AMP training step that never makes the host wait.
#include "amp/scaler_ops.h"
#include "helpers.h"
#include "optim/warm_cast.h"

using namespace hg;
using hg::test::check_close;

TEST_CASE("cuda autocast turns on with a device and runs matmul in the autocast dtype") {
  REQUIRE(cuda::is_available());
  const Tensor a = randn({8, 16}).to(kCUDA), b = randn({16, 4}).to(kCUDA);
  for (Dtype dt : {kFloat16, kBFloat16}) {
    amp::AutocastGuard g(kCUDA, dt);
    REQUIRE(amp::is_autocast_enabled(kCUDA));
    CHECK(amp::get_autocast_dtype(kCUDA) == dt);
    const Tensor c = matmul(a, b);
    CHECK(c.dtype() == dt);
    CHECK(c.device().is_cuda());
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCUDA));
  CHECK(matmul(a, b).dtype() == kFloat32);
}

TEST_CASE("cuda GradScaler unscales, flags inf and backs off without a host sync") {
  amp::GradScaler scaler(kCUDA, {.init_scale = 1024.0, .growth_interval = 2});
  REQUIRE(scaler.is_enabled());
  Tensor w = randn({8}).to(kCUDA).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  const Tensor before = w.detach().to(kCPU);
  const Tensor loss = (w * w).sum();
  const Tensor scaled = scaler.scale(loss);
  check_close(scaled.to(kCPU), loss.detach().to(kCPU) * 1024.0, {1e-6, 1e-6});
  scaled.backward();
  int64_t syncs = cuda::host_sync_count();
  scaler.unscale_(opt);
  CHECK(cuda::host_sync_count() == syncs);
  check_close(w.grad().to(kCPU), before * 2.0, {1e-6, 1e-6});
  syncs = cuda::host_sync_count();  // the read-back above was one; none may follow
  scaler.step(opt);
  scaler.update();
  CHECK(cuda::host_sync_count() == syncs);
  CHECK(scaler.get_scale() == 1024.0);  // one clean step of two
  // An inf gradient: the step is skipped on the device and the scale halves.
  const Tensor after_clean = w.detach().to(kCPU);
  opt.zero_grad();
  scaler.scale((w * full({8}, INFINITY).to(kCUDA)).sum()).backward();
  scaler.step(opt);
  scaler.update();
  check_close(w.detach().to(kCPU), after_clean, {0, 0});
  CHECK(scaler.get_scale() == 512.0);
  CHECK(scaler.get_growth_tracker() == 0);
  // Two clean steps grow it back.
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    scaler.scale((w * w).sum()).backward();
    scaler.step(opt);
    scaler.update();
  }
  CHECK(scaler.get_scale() == 1024.0);
}

TEST_CASE("cuda multi-tensor unscale over 70 gradients of two dtypes matches per-gradient unscales") {
  manual_seed(12);
  std::vector<Tensor> cpu_grads;
  for (int i = 0; i < 70; ++i) {  // more than one launch's 32 tensors, sizes across chunk boundaries
    const int64_t n = i % 7 == 0 ? 40000 : 1 + (i * 37) % 300;
    cpu_grads.push_back((randn({n}) * 100.0).to(i % 3 == 0 ? kBFloat16 : kFloat32));
  }
  for (bool with_inf : {false, true}) {
    CAPTURE(with_inf);
    TensorList many, each;
    for (const Tensor& g : cpu_grads) many.push_back(g.to(kCUDA)), each.push_back(g.to(kCUDA));
    if (with_inf) {
      many[45].fill_(INFINITY);
      each[45].fill_(INFINITY);
    }
    const Tensor scale = full({1}, 64.0).to(kCUDA);
    const Tensor found_many = zeros({1}).to(kCUDA), found_each = zeros({1}).to(kCUDA);
    amp::unscale_grads_(many, found_many, scale);
    for (const Tensor& g : each) amp::unscale_grad_(g, found_each, scale);
    CHECK(found_many.item<float>() == (with_inf ? 1.0f : 0.0f));
    CHECK(found_each.item<float>() == found_many.item<float>());
    for (size_t i = 0; i < many.size(); ++i) {
      CAPTURE(i);
      check_close(many[i].to(kCPU), each[i].to(kCPU), {0, 0});  // the same arithmetic, bit for bit
      if (!with_inf) check_close(many[i].to(kCPU).to(kFloat64), cpu_grads[i].to(kFloat64) / 64.0, {0, 0});
    }
  }
}

namespace {
// n steps of `make` optimizer on the same parameters and gradients on one device.
template <class Make>
std::vector<Tensor> run_steps(Device dev, Make make, int steps) {
  manual_seed(11);
  std::vector<Tensor> cpu_params{randn({5, 3}), randn({3})};
  std::vector<Tensor> params;
  for (const Tensor& p : cpu_params) params.push_back(p.detach().to(dev).requires_grad_());
  auto opt = make(params);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    manual_seed(100 + s);
    for (Tensor& p : params) p.set_grad(randn(p.shape()).to(dev));
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().to(kCPU));
  return out;
}
template <class Make>
void check_optimizer(Make make) {
  const auto cpu = run_steps(kCPU, make, 4), gpu = run_steps(kCUDA, make, 4);
  for (size_t i = 0; i < cpu.size(); ++i) check_close(gpu[i], cpu[i], {1e-6, 1e-5});
}
}  // namespace

TEST_CASE("cuda fused SGD and Adam/AdamW match the CPU update") {
  check_optimizer([](const TensorList& p) { return optim::SGD(p, {.lr = 0.1}); });
  check_optimizer([](const TensorList& p) {
    return optim::SGD(p, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  });
  check_optimizer([](const TensorList& p) {
    return optim::SGD(p, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  });
  check_optimizer([](const TensorList& p) { return optim::Adam(p, {.lr = 0.01, .weight_decay = 0.1}); });
  check_optimizer([](const TensorList& p) {
    optim::AdamOptions o;
    o.lr = 0.01, o.amsgrad = true;
    return optim::Adam(p, o);
  });
  check_optimizer([](const TensorList& p) { return optim::AdamW(p); });
}

TEST_CASE("cuda optimizers update strided parameters bit for bit as contiguous ones") {
  // A strided parameter goes through a contiguous copy and the same fused kernel.
  auto run = [](bool strided, auto make) {
    manual_seed(12);
    const Tensor v = randn({40, 30}).to(kCUDA);
    Tensor p = (strided ? v.t().contiguous().t() : v.clone()).requires_grad_();
    REQUIRE(p.is_contiguous() != strided);
    auto opt = make(TensorList{p});
    for (int s = 0; s < 3; ++s) {
      manual_seed(300 + s);
      p.set_grad(randn({40, 30}).to(kCUDA));
      opt.step();
    }
    return p.detach().to(kCPU);
  };
  auto sgd = [](const TensorList& p) {
    return optim::SGD(p, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  };
  auto adamw = [](const TensorList& p) { return optim::AdamW(p, {.lr = 0.01, .weight_decay = 0.05, .amsgrad = true}); };
  check_close(run(true, sgd), run(false, sgd), {0, 0});
  check_close(run(true, adamw), run(false, adamw), {0, 0});
}

TEST_CASE("cuda fused optimizers leave parameters and state bit for bit unchanged when found_inf is set") {
  Tensor w = randn({64}).to(kCUDA).requires_grad_();
  optim::SGD sgd({w}, {.lr = 0.1, .momentum = 0.9});
  optim::Adam adam({w}, {.lr = 0.1});
  const Tensor flag = ones({1}).to(kCUDA);
  const Tensor before = w.detach().to(kCPU);
  w.set_grad(randn({64}).to(kCUDA));
  const int64_t syncs = cuda::host_sync_count();
  sgd.step(flag);
  adam.step(flag);
  CHECK(cuda::host_sync_count() == syncs);
  check_close(w.detach().to(kCPU), before, {0, 0});
  CHECK(adam.state_dict().count("state.0.step") == 0);  // a skipped step does not count
  // The momentum buffer was not initialised by the skipped step: the next step starts it.
  sgd.step(zeros({1}).to(kCUDA));
  check_close(w.detach().to(kCPU), before - w.grad().to(kCPU) * 0.1, {1e-6, 1e-6});
}

TEST_CASE("cuda language-model step (embedding, cross_entropy, clip_grad_norm_, AdamW) makes no host sync") {
  manual_seed(6);
  const int64_t vocab = 50, dim = 16, batch = 8, seq = 12;
  Tensor table = (randn({vocab, dim}) * 0.1).to(kCUDA).requires_grad_();
  Tensor w1 = (randn({dim, 32}) * 0.2).to(kCUDA).requires_grad_();
  Tensor b1 = zeros({32}).to(kCUDA).requires_grad_();
  Tensor w2 = (randn({32, vocab}) * 0.2).to(kCUDA).requires_grad_();
  const Tensor tokens = randint(0, vocab, {batch, seq}).to(kCUDA);
  Tensor targets = randint(0, vocab, {batch * seq});
  targets.data_ptr<int64_t>()[3] = -100;  // one ignored target: the mean divides by the count on the device
  targets = targets.to(kCUDA);
  optim::AdamW opt({table, w1, b1, w2}, {.lr = 1e-2});
  for (double norm_type : {2.0, optim::kInfNorm}) {
    CAPTURE(norm_type);
    auto step = [&] {
      opt.zero_grad();
      const Tensor h = relu(matmul(embedding(table, tokens).reshape({batch * seq, dim}), w1) + b1);
      const Tensor loss = cross_entropy(matmul(h, w2), targets);
      loss.backward();
      const Tensor norm = optim::clip_grad_norm_({table, w1, b1, w2}, 0.5, norm_type);
      opt.step();
      return std::pair{loss, norm};
    };
    step();  // warm-up: allocator, cuBLASLt plans
    const int64_t syncs = cuda::host_sync_count();
    for (int i = 0; i < 3; ++i) step();
    const auto [loss, norm] = step();
    CHECK(cuda::host_sync_count() == syncs);
    CHECK(std::isfinite(loss.item<double>()));
    CHECK(norm.item<double>() > 0.0);
    CHECK(cuda::host_sync_count() == syncs + 2);  // the two read-backs above are the only ones
  }
}

TEST_CASE("cuda cross_entropy divides by the non-ignored count and clip_grad_norm_ matches the CPU") {
  manual_seed(8);
  const Tensor logits = randn({6, 5});
  const Tensor target = tensor<int64_t>({1, -100, 4, 0, -100, 2});
  check_close(cross_entropy(logits.to(kCUDA), target.to(kCUDA)).to(kCPU), cross_entropy(logits, target), {1e-6, 1e-6});
  check_close(nll_loss(logits.to(kCUDA), target.to(kCUDA)).to(kCPU), nll_loss(logits, target), {1e-6, 1e-6});
  for (double norm_type : {1.0, 2.0, optim::kInfNorm}) {
    CAPTURE(norm_type);
    const Tensor g1 = randn({4, 3}) * 3.0, g2 = randn({7});
    Tensor a = zeros({4, 3}).requires_grad_(), b = zeros({7}).requires_grad_();
    Tensor ca = zeros({4, 3}).to(kCUDA).requires_grad_(), cb = zeros({7}).to(kCUDA).requires_grad_();
    a.set_grad(g1.clone()), b.set_grad(g2.clone());
    ca.set_grad(g1.to(kCUDA)), cb.set_grad(g2.to(kCUDA));
    const Tensor n_cpu = optim::clip_grad_norm_({a, b}, 1.0, norm_type);
    const Tensor n_cuda = optim::clip_grad_norm_({ca, cb}, 1.0, norm_type);
    check_close(n_cuda.to(kCPU), n_cpu, {1e-5, 1e-5});
    check_close(ca.grad().to(kCPU), a.grad(), {1e-5, 1e-5});
    check_close(cb.grad().to(kCPU), b.grad(), {1e-5, 1e-5});
  }
}

TEST_CASE("cuda AMP training step (fp16 autocast, GradScaler) makes no host synchronisation") {
  manual_seed(5);
  Tensor w1 = (randn({16, 32}) * 0.2).to(kCUDA).requires_grad_();
  Tensor b1 = zeros({32}).to(kCUDA).requires_grad_();
  Tensor w2 = (randn({32, 4}) * 0.2).to(kCUDA).requires_grad_();
  const Tensor x = randn({64, 16}).to(kCUDA), y = randn({64, 4}).to(kCUDA);
  optim::AdamW opt({w1, b1, w2}, {});
  amp::GradScaler scaler(kCUDA);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(kCUDA, kFloat16);
      const Tensor h = relu(matmul(x, w1) + b1);
      const Tensor pred = matmul(h, w2);
      CHECK(pred.dtype() == kFloat16);
      loss = mse_loss(pred.to(kFloat32), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };
  step();  // warm-up: allocator, cuBLASLt plans
  const int64_t syncs = cuda::host_sync_count();
  const Tensor loss = step();
  CHECK(cuda::host_sync_count() == syncs);
  CHECK(std::isfinite(loss.item<double>()));
  CHECK(cuda::host_sync_count() == syncs + 1);  // the read-back above is the only one
}

TEST_CASE("cuda warm casts: the fused step writes each autocast weight's cast, bit for bit a fresh cast") {
  REQUIRE(cuda::is_available());
  for (Dtype dt : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(4);
    Tensor w = (randn({64, 32}) * 0.3).to(kCUDA).requires_grad_();
    const Tensor x = randn({8, 64}).to(kCUDA);
    optim::Adam opt({w}, {.lr = 0.01});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard g(kCUDA, dt);
        loss = mm(x, w).to(kFloat32).pow(2.0).mean();
      }
      loss.backward();
      opt.step();
    }
    const auto warm = optim::warm_cast_of(w);
    REQUIRE(warm != nullptr);
    REQUIRE(warm->value.defined());
    CHECK(warm->version == w.version());
    const auto got = warm->value.to(kCPU).to(kFloat32).to_vector<float>();
    const auto want = w.detach().to(dt).to(kCPU).to(kFloat32).to_vector<float>();
    CHECK(got == want);
    amp::AutocastGuard g(kCUDA, dt);
    CHECK(amp::cast_for_autocast(w, dt).storage() == warm->value.storage());
  }
}
