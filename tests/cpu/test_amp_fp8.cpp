// fp8 regions on the CPU emulation: the delayed-scaling recipe's history and scales against a
// host model of Transformer Engine's update, the fp8 GEMM against scalar fp8 arithmetic, the
// backward's dtypes, fallbacks, checkpoints, and a small MLP whose fp8 loss tracks bfloat16's.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <deque>
#include <vector>

#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_error;

namespace {

// Transformer Engine's delayed scaling for one column, on the host, written from the recipe's
// description (amp/fp8_recipe.h): the window of the last `len` amaxes, the scale from its max
// (or the newest), kept where amax is 0 or not finite.
struct HostColumn {
  size_t len;
  float fp8_max;
  int margin;
  bool most_recent;
  std::deque<float> window;  // newest first
  float current = 0;         // recorded since the last update
  float scale = 1;
  bool recorded = false;

  void record(float amax) {
    current = std::max(current, amax);
    recorded = true;
  }
  void update() {
    if (!recorded) return;  // nothing to fold in
    recorded = false;
    float amax = current;
    if (!most_recent)
      for (float v : window) amax = std::max(amax, v);
    if (amax > 0 && std::isfinite(amax)) scale = std::min((fp8_max / amax) * std::ldexp(1.0f, -margin), FLT_MAX);
    window.push_front(current);
    if (window.size() > len - 1) window.pop_back();  // row 0 plus len - 1 older rows
    current = 0;
  }
};

float fp8_max_abs(const Tensor& t) {
  float m = 0;
  for (float v : t.to_vector<float>())
    if (!std::isnan(v)) m = std::max(m, std::fabs(v));
  return m;
}

// A [rows, cols] float32 tensor whose largest magnitude is exactly `amax`.
Tensor with_amax(int64_t rows, int64_t cols, float amax) {
  Tensor t = rand({rows, cols}) * 0.5;
  std::vector<float> v = t.to_vector<float>();
  v[3] = -1.0f;
  for (float& x : v) x *= amax;
  return tensor(v, {rows, cols});
}

// The recipe's tensors, read back: history row r, column c.
float history_at(const amp::Fp8Recipe& r, int64_t row, int64_t col) {
  return r.amax_history().select(0, row).select(0, col).item<float>();
}

}  // namespace

TEST_CASE("amp: fp8 recipe: Transformer Engine's defaults, and bad options refused") {
  const amp::Fp8Recipe r;
  CHECK(r.options().amax_history_len == 1024);
  CHECK(r.options().margin == 0);
  CHECK(r.options().format == amp::Fp8Format::Hybrid);
  CHECK(r.options().amax_compute_algo == amp::AmaxAlgo::Max);
  CHECK(r.forward_dtype() == kFloat8E4M3);
  CHECK(r.backward_dtype() == kFloat8E5M2);
  CHECK(amp::Fp8Recipe({.format = amp::Fp8Format::E4M3}).backward_dtype() == kFloat8E4M3);
  CHECK(r.gemms() == 0);
  CHECK(!r.scale().defined());
  check_error([] { amp::Fp8Recipe bad({.amax_history_len = 0}); }, {"Fp8Recipe", "amax_history_len"});
  check_error([] { amp::Fp8Recipe bad({.margin = -1}); }, {"Fp8Recipe", "margin"});
}

TEST_CASE("amp: fp8 recipe: history and scales evolve as delayed scaling specifies (max and most_recent)") {
  for (bool most_recent : {false, true}) {
    CAPTURE(most_recent);
    const amp::Fp8Recipe recipe({.amax_history_len = 3,
                                 .margin = 1,
                                 .amax_compute_algo = most_recent ? amp::AmaxAlgo::MostRecent : amp::AmaxAlgo::Max});
    std::vector<HostColumn> host(3, HostColumn{3, 448.0f, 1, most_recent, {}, 0, 1, false});
    host[2].fp8_max = 57344.0f;
    const std::vector<float> a_amax{2.0f, 0.5f, 8.0f, 0.25f, 1.0f, 0.0f, 3.0f};
    for (size_t step = 0; step < a_amax.size(); ++step) {
      CAPTURE(step);
      manual_seed(static_cast<uint64_t>(step));
      Tensor a = with_amax(16, 32, a_amax[step]).requires_grad_();
      Tensor b = with_amax(32, 16, 4.0f - static_cast<float>(step) * 0.5f).requires_grad_();
      Tensor out;
      {
        amp::Fp8Autocast fp8(kCPU, recipe);
        for (auto& c : host) c.update();  // the region's entry folds the last step in
        out = mm(a, b);
      }
      REQUIRE(recipe.gemms() == 1);
      CHECK(out.dtype() == kBFloat16);
      const Tensor g = with_amax(16, 16, 100.0f * static_cast<float>(step + 1));
      out.backward(g.to(kBFloat16));
      host[0].record(fp8_max_abs(a));
      host[1].record(fp8_max_abs(b));
      host[2].record(fp8_max_abs(g.to(kBFloat16).to(kFloat32)));
      for (int64_t c = 0; c < 3; ++c) {
        CAPTURE(c);
        CHECK(recipe.scale().select(0, c).item<float>() == host[static_cast<size_t>(c)].scale);
        CHECK(recipe.scale_inv().select(0, c).item<float>() == 1.0f / host[static_cast<size_t>(c)].scale);
        CHECK(history_at(recipe, 0, c) == host[static_cast<size_t>(c)].current);
        // Rows 1.. hold the window oldest first, ending with the newest (row 0 rolls to the end).
        const auto& w = host[static_cast<size_t>(c)].window;
        for (size_t i = 0; i < w.size(); ++i) CHECK(history_at(recipe, 2 - static_cast<int64_t>(i), c) == w[i]);
      }
    }
    // amax 0 (step 5) kept the scale; the scales moved at all (the test can fail).
    CHECK(recipe.scale().select(0, 0).item<float>() != 1.0f);
  }
}

TEST_CASE("amp: fp8 recipe: an infinite amax keeps the scale, NaN elements are skipped, tiny amaxes cap at FLT_MAX") {
  const amp::Fp8Recipe recipe({.amax_history_len = 1});
  Tensor w = ones({16, 16});
  auto step = [&](const Tensor& a) {
    amp::Fp8Autocast fp8(kCPU, recipe);
    return mm(a, w);
  };
  (void)step(full({16, 16}, 2.0));
  (void)step(full({16, 16}, 2.0));
  CHECK(recipe.scale().select(0, 0).item<float>() == 224.0f);
  Tensor bad = full({16, 16}, 1.0);
  bad.select(0, 0).select(0, 0).fill_(INFINITY);
  (void)step(bad);
  (void)step(ones({16, 16}));
  CHECK(recipe.scale().select(0, 0).item<float>() == 224.0f);  // inf: the scale stayed
  Tensor nan = full({16, 16}, 4.0);
  nan.select(0, 0).select(0, 0).fill_(NAN);
  (void)step(nan);
  CHECK(history_at(recipe, 0, 0) == 4.0f);  // the NaN skipped: the other elements' amax
  (void)step(full({16, 16}, 1e-38));
  (void)step(ones({16, 16}));
  CHECK(recipe.scale().select(0, 0).item<float>() == FLT_MAX);
}

TEST_CASE("amp: fp8 region: linear and mm compute the scaled fp8 product, output bfloat16") {
  manual_seed(3);
  // Small integers: exact in E4M3 at scale 1 and at 448 / 2, and their products' sums exact in
  // bfloat16, so the first two steps must give x @ w^T exactly.
  const Tensor x = randint(-2, 3, {32, 16}).to(kFloat32);
  const Tensor w = randint(-2, 3, {16, 16}).to(kFloat32);
  const Tensor bias = full({16}, 0.5);
  const Tensor exact = (mm(x.to(kFloat64), w.to(kFloat64).t()) + 0.5).to(kFloat32);
  const amp::Fp8Recipe recipe;
  for (int step = 0; step < 2; ++step) {
    amp::Fp8Autocast fp8(kCPU, recipe);
    const Tensor y = linear(x, w, bias);
    CHECK(y.dtype() == kBFloat16);
    CHECK(y.shape() == Shape{32, 16});
    hg::test::check_close(y, exact, {0, 0});
  }
  CHECK(recipe.scale().select(0, 0).item<float>() == 448.0f / fp8_max_abs(x));
  // Values that do not fit (this region's first GEMM has the linear's columns, scales near 224,
  // so some saturate): each product's operands are the scalar saturating casts of x * s.
  const Tensor xr = randn({16, 32}) * 3.0;
  const Tensor wr = randn({32, 48});
  Tensor y;
  float sx = 0, sw = 0;
  {
    amp::Fp8Autocast fp8(kCPU, recipe);
    y = mm(xr, wr);
    sx = recipe.scale().select(0, 0).item<float>();
    sw = recipe.scale().select(0, 1).item<float>();
  }
  CHECK(recipe.gemms() == 1);  // GEMMs are keyed by their order in the region
  CHECK(sx > 100.0f);
  const auto xv = xr.to_vector<float>(), wv = wr.to_vector<float>(), yv = y.to(kFloat32).to_vector<float>();
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t j = 0; j < 48; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < 32; ++k) {
        const float qa =
            Float8E4M3::to_float(Float8E4M3::from_float_saturate(xv[static_cast<size_t>(i * 32 + k)] * sx));
        const float qb =
            Float8E4M3::to_float(Float8E4M3::from_float_saturate(wv[static_cast<size_t>(k * 48 + j)] * sw));
        acc += static_cast<double>(qa) * qb;
      }
      const float expected = static_cast<float>(BFloat16(static_cast<float>(acc / (static_cast<double>(sx) * sw))));
      const float got = yv[static_cast<size_t>(i * 48 + j)];
      // float32 accumulation in another order: at most one bfloat16 step apart.
      CHECK_MESSAGE(std::fabs(got - expected) <= std::fabs(expected) * 0x1p-7f + 1e-3f, i << "," << j);
    }
  }
}

TEST_CASE("amp: fp8 region: backward casts the gradient to E5M2 and returns each input's dtype") {
  manual_seed(4);
  Tensor x = randn({32, 64}).requires_grad_();
  Tensor w = (randn({16, 64}) * 0.1).detach().requires_grad_();
  Tensor b = zeros({16}).requires_grad_();
  const amp::Fp8Recipe recipe;
  OpRecorder rec;
  Tensor y;
  {
    amp::Fp8Autocast fp8(kCPU, recipe);
    y = linear(x, w, b);
  }
  y.to(kFloat32).sum().backward();
  size_t fwd_e4m3 = 0, bwd_e5m2 = 0, bwd_e4m3 = 0;
  for (const OpEvent& e : rec.events()) {
    if (e.name != "fp8_cast_transpose" || e.outputs.empty()) continue;  // the fused cast (amp/fp8_ops.h)
    if (!e.backward && e.outputs[0] == kFloat8E4M3) ++fwd_e4m3;
    if (e.backward && e.outputs[0] == kFloat8E5M2) ++bwd_e5m2;
    if (e.backward && e.outputs[0] == kFloat8E4M3) ++bwd_e4m3;
  }
  CHECK(fwd_e4m3 == 2);  // x and w
  CHECK(bwd_e5m2 == 1);  // the output's gradient
  CHECK(bwd_e4m3 == 0);
  CHECK(rec.count("fp8_gemm", false) == 1);
  CHECK(rec.count("fp8_gemm", true) == 1);
  CHECK(rec.count("mm", false) == 1);  // the widened product, float32
  CHECK(rec.count("linear") == 0);
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);
  // At scale 1 the gradient (ones) is exact in E5M2, so the gradients are sums of the forward's
  // E4M3 operands: x's gradient in float32 (x's dtype), from w's E4M3 copy, and w's from x's.
  hg::test::check_close(b.grad(), full({16}, 32.0), {0, 0});
  hg::test::check_close(x.grad(), ones({32, 16}).mm(w.detach().to(kFloat8E4M3).to(kFloat32)), {1e-6, 1e-6});
  hg::test::check_close(w.grad(), ones({16, 32}).mm(x.detach().to(kFloat8E4M3).to(kFloat32)), {1e-5, 1e-6});
  // ... and they differ from the float32 gradients (the test could tell).
  CHECK(!bitwise_equal(w.grad(), ones({16, 32}).mm(x.detach())));
  CHECK(history_at(recipe, 0, 2) == 1.0f);  // the gradient's amax recorded by backward
}

TEST_CASE("amp: fp8 region: shapes fp8 cannot take fall back to bfloat16, counted; other ops as in bfloat16") {
  manual_seed(5);
  const amp::Fp8Recipe recipe;
  const Tensor x = randn({8, 20}), w = randn({16, 20});
  OpRecorder rec;
  Tensor y, z, s, d;
  {
    amp::Fp8Autocast fp8(kCPU, recipe);
    CHECK(amp::is_fp8_autocast_enabled(kCPU));
    CHECK(!amp::is_fp8_autocast_enabled(kCUDA));
    y = linear(x, w);  // 20 and 8 are not multiples of 16
    z = mm(randn({16, 32}), randn({32, 16}));
    s = softmax(z, 1);                                             // as in a bfloat16 region
    d = mm(randn({16, 16}, kFloat64), randn({16, 16}, kFloat64));  // float64: not eligible
    {
      amp::AutocastGuard off(kCPU, std::nullopt, false);
      CHECK(!amp::is_fp8_autocast_enabled(kCPU));
      CHECK(mm(randn({16, 16}), randn({16, 16})).dtype() == kFloat32);
    }
    {
      amp::Fp8Autocast no_fp8(kCPU, recipe, false);
      CHECK(!amp::is_fp8_autocast_enabled(kCPU));
      CHECK(mm(randn({16, 16}), randn({16, 16})).dtype() == kBFloat16);  // the outer bfloat16 region
    }
  }
  CHECK(rec.count("fp8_fallback") == 1);
  CHECK(recipe.fallbacks() == 1);
  CHECK(rec.count("fp8_gemm") == 1);
  CHECK(y.dtype() == kBFloat16);
  {
    amp::AutocastGuard bf16(kCPU, kBFloat16);
    CHECK(bitwise_equal(y, linear(x, w)));  // exactly the bfloat16 region's linear
  }
  CHECK(z.dtype() == kBFloat16);
  CHECK(s.dtype() == kBFloat16);
  CHECK(d.dtype() == kFloat64);
  CHECK(!amp::is_fp8_autocast_enabled(kCPU));
  // Malformed calls still get the ops' own errors.
  {
    amp::Fp8Autocast fp8(kCPU, recipe);
    check_error([] { (void)mm(randn({16, 32}), randn({16, 32})); }, {"[mm]", "cannot be multiplied"});
  }
}

TEST_CASE("amp: fp8 recipe: state_dict saves and restores history and scales, and checks what it loads") {
  manual_seed(6);
  amp::Fp8Recipe recipe({.amax_history_len = 4});
  const Tensor w = randn({32, 32}).requires_grad_();
  for (int step = 0; step < 3; ++step) {
    Tensor y;
    {
      amp::Fp8Autocast fp8(kCPU, recipe);
      y = mm(randn({16, 32}), w);
    }
    y.to(kFloat32).sum().backward();
  }
  const auto dir = hg::test::temp_dir("fp8_recipe");
  const std::string path = (dir / "recipe.safetensors").string();
  save(recipe.state_dict(), path);
  amp::Fp8Recipe restored({.amax_history_len = 4});
  restored.load_state_dict(load(path));
  CHECK(bitwise_equal(restored.amax_history(), recipe.amax_history()));
  CHECK(bitwise_equal(restored.scale(), recipe.scale()));
  CHECK(bitwise_equal(restored.scale_inv(), recipe.scale_inv()));
  // Both go on identically: the same update from the same pending amaxes.
  recipe.update();
  restored.update();
  CHECK(bitwise_equal(restored.scale(), recipe.scale()));
  CHECK(bitwise_equal(restored.amax_history(), recipe.amax_history()));
  amp::Fp8Recipe other({.amax_history_len = 8});
  check_error([&] { other.load_state_dict(load(path)); }, {"Fp8Recipe", "amax_history_len"});
  StateDict bad = recipe.state_dict();
  bad["scale"].select(0, 1).fill_(-1.0);
  check_error([&] { restored.load_state_dict(bad); }, {"Fp8Recipe", "scale"});
  StateDict extra = recipe.state_dict();
  extra["bogus"] = ones({1});
  check_error([&] { restored.load_state_dict(extra); }, {"unexpected key 'bogus'"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("amp: fp8_scaled_cast: x * scale rounded and saturated, NaN kept, as the scalar cast") {
  const std::vector<float> v{0.0f, -0.0f, 1.0f, -3.3f, 250.0f, 1e9f, -INFINITY, INFINITY, NAN, 1e-6f, 0.0009f, 30000.f};
  const Tensor x = tensor(v);
  for (Dtype d : {kFloat8E4M3, kFloat8E5M2}) {
    const Tensor out = amp::fp8_scaled_cast(x, full({1}, 2.0), d);
    CHECK(out.dtype() == d);
    const Tensor c = out.contiguous();
    const auto* codes = static_cast<const uint8_t*>(c.raw_data());
    for (size_t i = 0; i < v.size(); ++i) {
      CAPTURE(i);
      const uint8_t expected = d == kFloat8E4M3 ? Float8E4M3::from_float_saturate(v[i] * 2.0f)
                                                : Float8E5M2::from_float_saturate(v[i] * 2.0f);
      CHECK(codes[i] == expected);
    }
  }
  check_error([&] { (void)amp::fp8_scaled_cast(x, full({2}, 1.0), kFloat8E4M3); }, {"fp8_scaled_cast", "scale"});
  check_error([&] { (void)amp::fp8_scaled_cast(x, full({1}, 1.0), kBFloat16); }, {"fp8_scaled_cast", "bfloat16"});
}

namespace {
struct Fp8Mlp {
  Tensor w1, b1, w2, b2, w3, b3;
  Fp8Mlp() {
    manual_seed(11);
    w1 = (randn({64, 32}) * (1.0 / std::sqrt(32.0))).detach().requires_grad_();
    b1 = zeros({64}).requires_grad_();
    w2 = (randn({64, 64}) * (1.0 / 8.0)).detach().requires_grad_();
    b2 = zeros({64}).requires_grad_();
    w3 = (randn({16, 64}) * (1.0 / 8.0)).detach().requires_grad_();
    b3 = zeros({16}).requires_grad_();
  }
  TensorList params() const { return {w1, b1, w2, b2, w3, b3}; }
  Tensor operator()(const Tensor& x) const { return linear(relu(linear(relu(linear(x, w1, b1)), w2, b2)), w3, b3); }
};

// Losses of 80 SGD steps on a fixed 16-class problem (a random teacher's argmax), under an fp8
// region (fp8 true) or a bfloat16 one.
std::vector<double> train_losses(bool fp8) {
  manual_seed(21);
  const Tensor x = randn({128, 32});
  const Tensor teacher = randn({32, 16});
  const Tensor y = argmax(mm(x, teacher), 1);
  Fp8Mlp model;
  optim::SGD opt(model.params(), {.lr = 0.1, .momentum = 0.9});
  const amp::Fp8Recipe recipe({.amax_history_len = 16});
  std::vector<double> losses;
  for (int step = 0; step < 80; ++step) {
    opt.zero_grad();
    Tensor loss;
    if (fp8) {
      amp::Fp8Autocast region(kCPU, recipe);
      loss = cross_entropy(model(x), y);
    } else {
      amp::AutocastGuard region(kCPU, kBFloat16);
      loss = cross_entropy(model(x), y);
    }
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  if (fp8) {
    CHECK(recipe.gemms() == 3);
    CHECK(recipe.fallbacks() == 0);
  }
  return losses;
}
}  // namespace

TEST_CASE("amp: fp8 region: a small MLP trains under the emulation and its loss tracks bfloat16's") {
  const std::vector<double> f8 = train_losses(true);
  const std::vector<double> bf = train_losses(false);
  MESSAGE("loss fp8 " << f8.front() << " -> " << f8.back() << ", bf16 " << bf.front() << " -> " << bf.back());
  CHECK(f8.back() < 0.5 * f8.front());  // it learns
  for (size_t i = 0; i < f8.size(); i += 10) {
    CAPTURE(i);
    CHECK(std::fabs(f8[i] - bf[i]) <= 0.1 * bf[i] + 0.02);
  }
  CHECK(std::fabs(f8.back() - bf.back()) <= 0.1 * bf.back() + 0.02);
}
