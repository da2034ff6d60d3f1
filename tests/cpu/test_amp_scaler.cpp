// amp GradScaler: defaults, scaling, skipping on inf/NaN, growth and its cap, the state
// machine's errors, clipping, several optimizers, accumulation, state_dict, disabled mode.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// A parameter with a float32 gradient already set (as if backward had run on a scaled loss).
Tensor param_with_grad(std::vector<float> values, std::vector<float> grad) {
  Tensor p = tensor(values).requires_grad_();
  p.set_grad(tensor(grad));
  return p;
}

// One iteration on p with gradient `scaled_grad` (what backward of a scaled loss produced).
void iterate(amp::GradScaler& scaler, optim::Optimizer& opt, const Tensor& p, std::vector<float> scaled_grad) {
  scaler.scale(ones({}));  // creates the scale on first use, as scale(loss) does
  p.set_grad(tensor(scaled_grad));
  scaler.step(opt);
  scaler.update();
}
}  // namespace

TEST_CASE("amp: GradScaler contract and defaults") {
  namespace amp = hg::amp;
  hg::Tensor w = hg::randn({3, 1}).requires_grad_();
  hg::optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler(hg::kCPU);
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.get_growth_factor() == 2.0);
  CHECK(scaler.get_backoff_factor() == 0.5);
  CHECK(scaler.get_growth_interval() == 2000);
  CHECK(scaler.is_enabled());
  amp::GradScaler s2(
      hg::kCPU,
      {.init_scale = 1024.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3, .enabled = true});
  hg::Tensor loss = hg::mm(hg::randn({4, 3}), w).pow(2.0).mean();
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  scaler.step(opt);
  scaler.update();
  scaler.update(512.0);
  double s = scaler.get_scale();
  CHECK(s == 512.0);
  auto sd = scaler.state_dict();
  s2.load_state_dict(sd);
  CHECK(s2.get_scale() == 512.0);
  CHECK(s2.get_growth_interval() == 2000);
}

TEST_CASE("amp: GradScaler scale() multiplies by the scale, in float32") {
  amp::GradScaler scaler(kCPU, {.init_scale = 8.0});
  Tensor loss = full({}, 1.5, kBFloat16);
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.shape() == Shape{});
  CHECK(scaled.item<double>() == 12.0);
  TensorList many = scaler.scale(TensorList{full({2}, 1.0), full({}, 3.0, kFloat16)});
  CHECK(many[0].to_vector<float>() == std::vector<float>{8, 8});
  CHECK(many[1].item<double>() == 24.0);
  // A float16 loss scaled by 65536 would overflow float16; the float32 result does not.
  amp::GradScaler big(kCPU);
  CHECK(std::isfinite(big.scale(full({}, 2.0, kFloat16)).item<double>()));
}

TEST_CASE("amp: GradScaler unscale_ divides every gradient and leaves found_inf clear") {
  amp::GradScaler scaler(kCPU, {.init_scale = 4.0});
  Tensor p = param_with_grad({1, 2}, {8, -4});
  Tensor q = tensor(std::vector<float>{1, 2, 3, 4}).reshape({2, 2}).requires_grad_();
  q.set_grad(tensor(std::vector<float>{4, 8, 12, 16}).reshape({2, 2}).t());  // non-contiguous
  Tensor r = tensor(std::vector<float>{0, 0}).to(kBFloat16).detach().requires_grad_();
  r.set_grad(full({2}, 2.0, kBFloat16));  // bfloat16 gradients are allowed
  optim::SGD opt({p, q, r}, {.lr = 1.0});
  scaler.scale(ones({}));
  OpRecorder rec;
  scaler.unscale_(opt);
  CHECK(rec.count("amp_unscale_") == 1);  // one multi-tensor op per device, over every gradient
  CHECK(p.grad().to_vector<float>() == std::vector<float>{2, -1});
  CHECK(q.grad().to_vector<float>() == std::vector<float>{1, 3, 2, 4});
  CHECK(r.grad().to_vector<float>() == std::vector<float>{0.5f, 0.5f});
  scaler.step(opt);
  CHECK(p.to_vector<float>() == std::vector<float>{-1, 3});
}

TEST_CASE("amp: GradScaler unscale_ multiplies by PyTorch's float32 reciprocal, in float32, over lanes and tail") {
  // PyTorch's rule: inv_scale = scale.double().reciprocal().float(), then grad * inv_scale in
  // float. With a scale of 3 that differs from the product taken in double: 7 / 3 gives
  // 2.3333335 (2.3333333 in double), 1304 / 3 gives 434.66669 (434.66666).
  amp::GradScaler scaler(kCPU, {.init_scale = 3.0});
  const int64_t n = 16 * 60 + 5;  // 60 vectors and a 5-value tail
  Tensor small = param_with_grad({0, 0}, {7.0f, 1304.0f});
  Tensor big = zeros({n}).requires_grad_();
  big.set_grad(full({n}, 7.0));
  optim::SGD opt({small, big}, {.lr = 1.0});
  scaler.scale(ones({}));
  scaler.unscale_(opt);
  CHECK(small.grad().to_vector<float>() == std::vector<float>{2.3333335f, 434.66669f});
  CHECK(bitwise_equal(big.grad(), full({n}, 2.3333335f)));
  scaler.step(opt);
  CHECK(opt.steps() == 1);  // nothing non-finite found
  // inf or NaN anywhere, in a vector's lane or in the tail, is found.
  for (int64_t at : {int64_t{0}, int64_t{517}, n - 16 - 5, n - 1}) {
    for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      CAPTURE(at);
      CAPTURE(bad);
      amp::GradScaler s(kCPU, {.init_scale = 3.0});
      Tensor g = full({n}, 7.0);
      g.index_put_({at}, full({}, bad));
      big.set_grad(g);
      optim::SGD o({big}, {.lr = 1.0});
      s.scale(ones({}));
      s.unscale_(o);
      s.step(o);
      s.update();
      CHECK(o.steps() == 0);  // skipped
      CHECK(s.get_scale() == 1.5);
    }
  }
}

TEST_CASE("amp: GradScaler skips the step on inf or NaN, bit for bit, and backs off") {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    amp::GradScaler scaler(kCPU, {.init_scale = 1024.0, .growth_interval = 3});
    Tensor p = param_with_grad({1.25f, -3.5f, 0.1f}, {0, 0, 0});
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
    const Tensor before = p.detach().clone();
    iterate(scaler, opt, p, {1.0f, bad, 2.0f});
    CHECK(bitwise_equal(p, before));
    CHECK(opt.steps() == 0);
    CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);
    CHECK(scaler.get_scale() == 512.0);
    CHECK(scaler.get_growth_tracker() == 0);
    // A clean step afterwards runs.
    iterate(scaler, opt, p, {1024.0f, 1024.0f, 1024.0f});
    CHECK(opt.steps() == 1);
    CHECK_FALSE(bitwise_equal(p, before));
    CHECK(scaler.get_growth_tracker() == 1);
  }
}

TEST_CASE("amp: GradScaler grows after growth_interval clean steps, capped to finite") {
  amp::GradScaler scaler(kCPU, {.init_scale = 2.0, .growth_factor = 4.0, .growth_interval = 3});
  Tensor p = param_with_grad({0}, {0});
  optim::SGD opt({p}, {.lr = 0.0});
  iterate(scaler, opt, p, {1});
  iterate(scaler, opt, p, {1});
  CHECK(scaler.get_scale() == 2.0);
  CHECK(scaler.get_growth_tracker() == 2);
  iterate(scaler, opt, p, {1});
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.get_growth_tracker() == 0);
  // An inf in the middle resets the count.
  iterate(scaler, opt, p, {1});
  iterate(scaler, opt, p, {INFINITY});
  CHECK(scaler.get_scale() == 4.0);
  for (int i = 0; i < 3; ++i) iterate(scaler, opt, p, {1});
  CHECK(scaler.get_scale() == 16.0);

  // Tiny losses never overflow: near float32's max, growth stops instead of reaching inf.
  amp::GradScaler capped(kCPU, {.init_scale = 3e38, .growth_interval = 1});
  for (int i = 0; i < 3; ++i) iterate(capped, opt, p, {0});
  CHECK(std::isfinite(capped.get_scale()));
  CHECK(capped.get_scale() == doctest::Approx(3e38));
  amp::GradScaler grows_to_max(kCPU, {.init_scale = 1.0, .growth_factor = 1e10, .growth_interval = 1});
  for (int i = 0; i < 10; ++i) iterate(grows_to_max, opt, p, {0});
  CHECK(grows_to_max.get_scale() == doctest::Approx(1e30));
}

TEST_CASE("amp: GradScaler state machine errors") {
  Tensor p = param_with_grad({1}, {1});
  optim::SGD opt({p}, {.lr = 0.1});
  amp::GradScaler scaler(kCPU);
  check_error([&] { scaler.unscale_(opt); }, {"[GradScaler]", "unscale_() was called before scale()"});
  check_error([&] { scaler.step(opt); }, {"[GradScaler]", "step() was called before scale()"});
  check_error([&] { scaler.update(); }, {"[GradScaler]", "update() was called before scale()"});
  check_error([&] { scaler.update(2.0); }, {"[GradScaler]", "before scale()"});
  CHECK(scaler.get_scale() == 65536.0);  // a query, not an error
  scaler.scale(ones({}));
  check_error([&] { scaler.update(); }, {"[GradScaler]", "no optimizer was unscaled or stepped"});
  scaler.unscale_(opt);
  check_error([&] { scaler.unscale_(opt); }, {"[GradScaler]", "unscale_() was already called"});
  scaler.step(opt);
  check_error([&] { scaler.unscale_(opt); }, {"[GradScaler]", "unscale_() was called after step()"});
  check_error([&] { scaler.step(opt); }, {"[GradScaler]", "step() was already called"});
  scaler.update();
  p.set_grad(ones({1}));
  scaler.step(opt);  // ready again after update()
  scaler.update();
  check_error([] { amp::GradScaler bad(kCPU, {.growth_factor = 1.0}); }, {"[GradScaler]", "growth_factor"});
  check_error([] { amp::GradScaler bad(kCPU, {.backoff_factor = 1.0}); }, {"[GradScaler]", "backoff_factor"});
  check_error([] { amp::GradScaler bad(kCPU, {.growth_interval = 0}); }, {"[GradScaler]", "growth_interval"});
  check_error([] { amp::GradScaler bad(kCPU, {.init_scale = -1}); }, {"[GradScaler]", "scale"});
  check_error([&] { scaler.set_growth_factor(0.5); }, {"[GradScaler]", "growth_factor"});
  scaler.set_backoff_factor(0.25);
  scaler.set_growth_interval(10);
  CHECK(scaler.get_backoff_factor() == 0.25);
  CHECK(scaler.get_growth_interval() == 10);
}

TEST_CASE("amp: GradScaler refuses float16 gradients") {
  Tensor p = zeros({2}, kFloat16).requires_grad_();
  p.set_grad(ones({2}, kFloat16));
  optim::SGD opt({p}, {.lr = 0.1});
  amp::GradScaler scaler(kCPU);
  scaler.scale(ones({}));
  check_error([&] { scaler.unscale_(opt); }, {"[GradScaler]", "float16 gradient", "float32"});
  check_error([&] { scaler.step(opt); }, {"[GradScaler]", "float16 gradient"});
}

TEST_CASE("amp: GradScaler clipping after unscale_ sees the true gradients") {
  Tensor w = tensor(std::vector<float>{1, -2, 3}).requires_grad_();
  optim::SGD opt({w}, {.lr = 1.0});
  amp::GradScaler scaler(kCPU, {.init_scale = 1024.0});
  Tensor loss = (w * w).sum() * 0.5;  // grad = w
  scaler.scale(loss).backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1024, -2048, 3072});
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, -2, 3});
  {
    // Clip the gradient norm to 1 in place (what nn::utils::clip_grad_norm_ will do).
    NoGradGuard ng;
    const double norm = std::sqrt((w.grad() * w.grad()).sum().item<double>());
    Tensor g = w.grad();
    g.mul_(1.0 / norm);
  }
  scaler.step(opt);  // does not unscale again
  scaler.update();
  check_close(
      w, tensor(std::vector<float>{1 - 1 / std::sqrt(14.0f), -2 + 2 / std::sqrt(14.0f), 3 - 3 / std::sqrt(14.0f)}));
}

TEST_CASE("amp: GradScaler with two optimizers: each skips on its own inf, the scale backs off once") {
  Tensor a = param_with_grad({1}, {0}), b = param_with_grad({1}, {0});
  optim::SGD opt_a({a}, {.lr = 1.0}), opt_b({b}, {.lr = 1.0});
  amp::GradScaler scaler(kCPU, {.init_scale = 4.0});
  scaler.scale(ones({}));
  a.set_grad(full({1}, INFINITY));
  b.set_grad(full({1}, 4.0));
  scaler.step(opt_a);
  scaler.step(opt_b);
  scaler.update();
  CHECK(a.item<float>() == 1.0f);  // skipped
  CHECK(b.item<float>() == 0.0f);  // 1 - 4/4
  CHECK(scaler.get_scale() == 2.0);
  // Both clean: both step, no back-off.
  scaler.scale(ones({}));
  a.set_grad(full({1}, 2.0));
  b.set_grad(full({1}, 2.0));
  scaler.step(opt_a);
  scaler.step(opt_b);
  scaler.update();
  CHECK(a.item<float>() == 0.0f);
  CHECK(b.item<float>() == -1.0f);
  CHECK(scaler.get_scale() == 2.0);
}

TEST_CASE("amp: GradScaler with gradient accumulation over micro-batches") {
  manual_seed(3);
  Tensor w = randn({3, 1}).requires_grad_();
  Tensor w_ref = w.detach().clone().requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1}), opt_ref({w_ref}, {.lr = 0.1});
  amp::GradScaler scaler(kCPU, {.init_scale = 256.0});
  const int micro = 4;
  for (int i = 0; i < micro; ++i) {
    Tensor x = randn({2, 3});
    scaler.scale(mm(x, w).pow(2.0).mean() * (1.0 / micro)).backward();
    (mm(x, w_ref).pow(2.0).mean() * (1.0 / micro)).backward();
  }
  scaler.step(opt);
  scaler.update();
  opt_ref.step();
  check_close(w, w_ref);
}

TEST_CASE("amp: GradScaler state_dict round trip") {
  amp::GradScaler a(kCPU, {.init_scale = 64.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 5});
  Tensor p = param_with_grad({0}, {0});
  optim::SGD opt({p}, {.lr = 0.0});
  iterate(a, opt, p, {1});
  iterate(a, opt, p, {1});
  auto sd = a.state_dict();
  CHECK(sd.size() == 5);
  CHECK(sd.at("scale").item<double>() == 64.0);
  CHECK(sd.at("growth_tracker").item<int64_t>() == 2);
  amp::GradScaler b(kCPU);
  b.load_state_dict(sd);  // before b's first scale(): applied when the scale is created
  CHECK(b.get_scale() == 64.0);
  CHECK(b.get_growth_factor() == 3.0);
  CHECK(b.get_backoff_factor() == 0.25);
  CHECK(b.get_growth_interval() == 5);
  CHECK(b.get_growth_tracker() == 2);
  for (int i = 0; i < 3; ++i) iterate(b, opt, p, {1});  // 2 + 3 = 5 clean steps: grows
  CHECK(b.get_scale() == 192.0);
  a.load_state_dict(b.state_dict());  // into a scaler whose scale exists
  CHECK(a.get_scale() == 192.0);
  CHECK(a.get_growth_tracker() == 0);
  auto bad = sd;
  bad["bogus"] = ones({});
  check_error([&] { a.load_state_dict(bad); }, {"[GradScaler]", "unexpected key 'bogus'"});
  bad = sd;
  bad.erase("growth_factor");
  check_error([&] { a.load_state_dict(bad); }, {"[GradScaler]", "missing key 'growth_factor'"});
  check_error([&] { a.load_state_dict({}); }, {"[GradScaler]", "empty"});
}

TEST_CASE("amp: a disabled GradScaler passes everything through") {
  amp::GradScaler scaler(kCPU, {.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  Tensor w = tensor(std::vector<float>{1}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.5});
  Tensor loss = (w * 3.0).sum();
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.is_same(loss));
  scaled.backward();
  scaler.unscale_(opt);
  CHECK(w.grad().item<float>() == 3.0f);
  scaler.step(opt);
  scaler.update();
  scaler.update(8.0);
  CHECK(w.item<float>() == -0.5f);
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict().empty());
  // A cuda scaler without a CUDA device warns once and is disabled, so CPU runs still work
  // (with a device it is on: the cpu suite also runs on GPU machines as a baseline).
  amp::GradScaler cuda_scaler(kCUDA);
  CHECK(cuda_scaler.is_enabled() == cuda::is_available());
}
