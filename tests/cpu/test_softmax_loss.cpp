// softmax / log_softmax and the losses against float64 references computed here, with
// gradchecks and error messages.
#include <cfloat>
#include <cmath>
#include <random>

#include "helpers.h"
#include "kernels/cpu/simd/vec_math.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {
constexpr Dtype kFloatDtypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

// Softmax (or log_softmax) of a float64 copy of t along dim, by index arithmetic.
Tensor softmax_ref(const Tensor& t, int64_t dim, bool log) {
  auto v = t.to_vector<double>();
  int64_t outer = 1, n = t.dim() ? t.size(dim) : 1, inner = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < (dim + t.dim()) % t.dim()) outer *= t.size(d);
    if (d > (dim + t.dim()) % t.dim()) inner *= t.size(d);
  }
  std::vector<double> r(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return static_cast<size_t>((o * n + k) * inner + i); };
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, v[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) r[at(k)] = log ? v[at(k)] - m - std::log(s) : std::exp(v[at(k)] - m) / s;
    }
  return tensor(r, t.shape());
}

// Per-sample cross-entropy of [N, C] logits (float64), with label smoothing; ignored samples 0.
std::vector<double> ce_ref(const Tensor& logits, const std::vector<int64_t>& target, int64_t ignore, double eps) {
  const auto x = logits.to_vector<double>();
  const int64_t n = logits.size(0), c = logits.size(1);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore) continue;
    double m = -INFINITY, s = 0, mean_neg_logp = 0;
    for (int64_t k = 0; k < c; ++k) m = std::max(m, x[i * c + k]);
    for (int64_t k = 0; k < c; ++k) s += std::exp(x[i * c + k] - m);
    const double lse = m + std::log(s);
    for (int64_t k = 0; k < c; ++k) mean_neg_logp += (lse - x[i * c + k]) / static_cast<double>(c);
    out[i] = (1 - eps) * (lse - x[i * c + target[i]]) + eps * mean_neg_logp;
  }
  return out;
}

Tensor reduce_ref(const std::vector<double>& per, Reduction r, double count) {
  double s = 0;
  for (double v : per) s += v;
  if (r == Reduction::None) return tensor(per);
  return scalar_tensor(r == Reduction::Sum ? s : s / count, kFloat64);
}

Tolerance loose(Dtype d) {  // a loss sums many terms: float32 gets a little more room
  return d == kFloat32 ? Tolerance{1e-5, 1e-4} : hg::test::tolerance(d);
}
}  // namespace

TEST_CASE("softmax and log_softmax match float64 along every dim, in every float dtype") {
  manual_seed(10);
  const Tensor x64 = randn({4, 5, 6}, kFloat64) * 3.0;
  for (Dtype d : kFloatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d), xr = x.to(kFloat64);
    for (int64_t dim : {0, 1, 2, -1}) {
      CAPTURE(dim);
      check_close(softmax(x, dim), softmax_ref(xr, dim, false));
      check_close(log_softmax(x, dim), softmax_ref(xr, dim, true), loose(d));
      CHECK(softmax(x, dim).dtype() == d);
    }
    const Tensor m = x.reshape({20, 6});
    check_close(softmax(non_contiguous(m), 1), softmax_ref(m.to(kFloat64), 1, false));
    check_close(non_contiguous(m).log_softmax(0), softmax_ref(m.to(kFloat64), 0, true), loose(d));
    check_close(m.softmax(-1), softmax_ref(m.to(kFloat64), -1, false));
  }
}

TEST_CASE("softmax is stable for large inputs, handles 0-d and empty tensors, and takes an output dtype") {
  Tensor big = tensor(std::vector<float>{1000, 1001, 1002, -1000});
  check_close(softmax(big, 0), softmax_ref(big, 0, false));
  check_close(log_softmax(big, 0), softmax_ref(big, 0, true));
  // 0-d with dim -1 (or 0) is one row of one element, as PyTorch.
  CHECK(softmax(scalar_tensor(3.5), -1).item<float>() == 1.0f);
  CHECK(softmax(scalar_tensor(3.5), -1).shape() == Shape{});
  CHECK(log_softmax(scalar_tensor(-2.0), 0).item<float>() == 0.0f);
  CHECK(softmax(zeros({0, 5}), 1).shape() == Shape{0, 5});
  CHECK(softmax(zeros({3, 0}), 1).shape() == Shape{3, 0});
  // float16 in, float32 out: read directly, computed in float32.
  const Tensor h = (randn({3, 7}) * 4.0).to(kFloat16);
  Tensor y = softmax(h, 1, kFloat32);
  CHECK(y.dtype() == kFloat32);
  check_close(y, softmax_ref(h.to(kFloat64), 1, false), Tolerance{1e-6, 1e-5});
  check_close(log_softmax(h, 1, kFloat64), softmax_ref(h.to(kFloat64), 1, true), Tolerance{1e-6, 1e-6});
  // A row with NaN is NaN, the other rows are unaffected.
  Tensor nan_row = tensor(std::vector<float>{1, NAN, 2, 0, 1, 2}, {2, 3});
  auto s = softmax(nan_row, 1).to_vector<float>();
  CHECK(std::isnan(s[0]));
  CHECK(std::abs(s[3] + s[4] + s[5] - 1.0f) < 1e-6f);
  // Long rows (the 16-lane max): NaN in the vector part or in the tail, the largest value in
  // either part; the rows agree with float64 and cross_entropy with its float64 value.
  for (const int64_t at : {3, 20, 37}) {
    CAPTURE(at);
    Tensor row = randn({2, 40});
    row.select(0, 0).narrow(0, at, 1).fill_(NAN);
    row.select(0, 1).narrow(0, at, 1).fill_(9.0);
    const auto p = softmax(row, 1).to_vector<float>();
    for (int64_t i = 0; i < 40; ++i) CHECK(std::isnan(p[static_cast<size_t>(i)]));
    check_close(softmax(row, 1).select(0, 1), softmax_ref(row.to(kFloat64), 1, false).select(0, 1),
                Tolerance{1e-6, 1e-5});
    const Tensor target = tensor(std::vector<int64_t>{1, 2}, {2});
    const auto losses = cross_entropy(row, target, Reduction::None).to_vector<float>();
    CHECK(std::isnan(losses[0]));
    CHECK(
        losses[1] ==
        doctest::Approx(cross_entropy(row.to(kFloat64), target, Reduction::None).to_vector<double>()[1]).epsilon(1e-6));
  }
}

TEST_CASE("softmax gradients match finite differences") {
  manual_seed(11);
  using autograd::gradcheck;
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    CHECK(gradcheck([dim](const TensorList& x) { return softmax(x[0], dim); }, {randn({3, 4, 2})}));
    CHECK(gradcheck([dim](const TensorList& x) { return log_softmax(x[0], dim); }, {randn({3, 4, 2})}));
  }
  CHECK(gradcheck([](const TensorList& x) { return softmax(x[0].t(), 1); }, {randn({4, 3})}));
  // The gradient reaches a float16 input in float16, through a float32 output.
  Tensor h = randn({2, 3}).to(kFloat16).requires_grad_();
  softmax(h, 1, kFloat32).select(1, 0).sum().backward();
  CHECK(h.grad().dtype() == kFloat16);
  CHECK(std::abs(h.grad().sum().item<float>()) < 1e-3f);  // softmax rows sum to 1: zero net gradient
}

TEST_CASE("softmax errors name the op, dim and dtype") {
  check_error([] { softmax(zeros({2, 3}, kInt64), 1); }, {"[softmax]", "int64", "[2, 3]"});
  check_error([] { log_softmax(zeros({2, 3}), 2); }, {"[log_softmax]", "dim 2"});
  check_error([] { softmax(zeros({2}), 0, kInt32); }, {"[softmax]", "int32"});
}

TEST_CASE("cross_entropy matches float64 for every reduction, ignore_index and label smoothing") {
  manual_seed(12);
  const Tensor x64 = randn({6, 5}, kFloat64) * 2.0;
  const std::vector<int64_t> t{0, 4, 2, -100, 1, 4};
  const Tensor target = tensor(t);
  for (Dtype d : kFloatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d), xr = x.to(kFloat64);
    for (double eps : {0.0, 0.1}) {
      CAPTURE(eps);
      const auto per = ce_ref(xr, t, -100, eps);
      for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
        Tensor loss = cross_entropy(x, target, r, -100, eps);
        CHECK(loss.dtype() == d);
        check_close(loss, reduce_ref(per, r, 5.0), loose(d));
      }
      check_close(cross_entropy(non_contiguous(x), target, Reduction::Mean, -100, eps),
                  reduce_ref(per, Reduction::Mean, 5), loose(d));
    }
    // A custom ignore_index; -100 is then an ordinary (out-of-range) class.
    const std::vector<int64_t> t2{0, 4, 2, 3, 1, 4};
    check_close(cross_entropy(x, tensor(t2), Reduction::Mean, 4), reduce_ref(ce_ref(xr, t2, 4, 0), Reduction::Mean, 4),
                loose(d));
  }
}

TEST_CASE("cross_entropy over [N, C, d] logits, large logits, 1-d input, all-ignored batch") {
  manual_seed(13);
  // [N, C, d]: class dim 1, the same as moving it last and flattening.
  const Tensor x = randn({2, 4, 3}, kFloat64);
  const Tensor target = tensor(std::vector<int64_t>{0, 3, 1, 2, 2, -100}, {2, 3});
  const Tensor flat = x.permute({0, 2, 1}).reshape({6, 4});
  const auto per = ce_ref(flat, target.to_vector<int64_t>(), -100, 0.2);
  check_close(cross_entropy(x, target, Reduction::None, -100, 0.2), tensor(per, {2, 3}));
  check_close(cross_entropy(x, target, Reduction::Mean, -100, 0.2), reduce_ref(per, Reduction::Mean, 5));
  // Logits of 1e4 overflow a naive exp in every dtype; the max-subtracted form does not.
  Tensor big = tensor(std::vector<float>{1e4f, 0, -1e4f, 0, 1e4f, 1e4f}, {2, 3});
  auto l = cross_entropy(big, tensor(std::vector<int64_t>{0, 0}), Reduction::None).to_vector<float>();
  CHECK(l[0] == 0.0f);
  CHECK(std::abs(l[1] - 1e4f - std::log(2.0f)) < 1e-2f);
  // [C] with a 0-d target.
  Tensor one = tensor(std::vector<double>{1, 2, 3});
  check_close(cross_entropy(one, scalar_tensor(2, kInt64)),
              scalar_tensor(std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 3, kFloat64));
  // Every target ignored: the mean is 0 / 0 (NaN, as PyTorch); the sum is 0.
  Tensor ignored = tensor(std::vector<int64_t>{-100, -100});
  CHECK(std::isnan(cross_entropy(zeros({2, 3}), ignored).item<float>()));
  CHECK(cross_entropy(zeros({2, 3}), ignored, Reduction::Sum).item<float>() == 0.0f);
  CHECK(cross_entropy(zeros({0, 3}), zeros({0}, kInt64), Reduction::None).shape() == Shape{0});
}

TEST_CASE("cross_entropy and nll_loss gradients match finite differences") {
  manual_seed(14);
  using autograd::gradcheck;
  const Tensor target = tensor(std::vector<int64_t>{1, 0, -100, 3});
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    for (double eps : {0.0, 0.3}) {
      CHECK(gradcheck([&](const TensorList& x) { return cross_entropy(x[0], target, r, -100, eps); }, {randn({4, 5})}));
    }
    CHECK(gradcheck([&](const TensorList& x) { return nll_loss(x[0], target, r); }, {randn({4, 5})}));
  }
  const Tensor t3 = tensor(std::vector<int64_t>{0, 2, 1, 1}, {2, 2});
  CHECK(gradcheck([&](const TensorList& x) { return cross_entropy(x[0], t3, Reduction::Mean, -100, 0.1); },
                  {randn({2, 3, 2})}));
  CHECK(gradcheck([&](const TensorList& x) { return nll_loss(x[0], t3, Reduction::Sum); }, {randn({2, 3, 2})}));
  CHECK(gradcheck([&](const TensorList& x) { return cross_entropy(x[0].t(), target); }, {randn({5, 4})}));
  // The fused backward is softmax - onehot over the non-ignored count.
  Tensor x = zeros({2, 2}).requires_grad_();
  cross_entropy(x, tensor(std::vector<int64_t>{1, -100})).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{0.5f, -0.5f, 0, 0});
}

TEST_CASE("nll_loss matches picking -log_probs and agrees with cross_entropy") {
  manual_seed(15);
  for (Dtype d : kFloatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({5, 4}).to(d);
    const Tensor target = tensor(std::vector<int64_t>{3, 0, -100, 1, 1});
    const auto v = x.to_vector<double>();
    std::vector<double> per{-v[3], -v[4], 0, -v[13], -v[17]};
    check_close(nll_loss(x, target, Reduction::None), reduce_ref(per, Reduction::None, 4));
    check_close(nll_loss(x, target), reduce_ref(per, Reduction::Mean, 4), loose(d));
    check_close(nll_loss(x, target, Reduction::Sum), reduce_ref(per, Reduction::Sum, 4), loose(d));
    if (d == kFloat32 || d == kFloat64) check_close(nll_loss(log_softmax(x, 1), target), cross_entropy(x, target));
  }
}

TEST_CASE("classification loss errors name the op, the bad index and the shapes") {
  const Tensor x = zeros({3, 4});
  check_error(
      [&] {
        cross_entropy(x, tensor(std::vector<int64_t>{0, 7, 1}));
      },
      {"[cross_entropy]", "target 7", "4 classes"});
  check_error([&] { cross_entropy(x, tensor(std::vector<int64_t>{0, -1, 1})); }, {"[cross_entropy]", "target -1"});
  check_error([&] { nll_loss(x, tensor(std::vector<int64_t>{4, 0, 1})); }, {"[nll_loss]", "target 4", "4 classes"});
  check_error(
      [&] {
        cross_entropy(x, tensor(std::vector<int64_t>{0, 1}));
      },
      {"[cross_entropy]", "[3]", "[3, 4]", "[2]"});
  check_error([&] { cross_entropy(x, tensor(std::vector<float>{0, 1, 2})); }, {"[cross_entropy]", "int64", "float32"});
  check_error(
      [&] {
        cross_entropy(zeros({3, 4}, kInt64), tensor(std::vector<int64_t>{0, 1, 2}));
      },
      {"[cross_entropy]", "floating-point", "int64"});
  check_error(
      [&] {
        cross_entropy(x, tensor(std::vector<int64_t>{0, 1, 2}), Reduction::Mean, -100, 1.5);
      },
      {"[cross_entropy]", "label_smoothing", "1.5"});
  check_error([&] { nll_loss(scalar_tensor(1.0), scalar_tensor(0, kInt64)); }, {"[nll_loss]", "0-d"});
}

TEST_CASE("mse_loss, binary_cross_entropy(_with_logits) match float64 in every float dtype") {
  manual_seed(16);
  const Tensor a64 = randn({4, 3}, kFloat64), b64 = randn({4, 3}, kFloat64);
  const Tensor p64 = rand({4, 3}, kFloat64) * 0.9 + 0.05, y64 = rand({4, 3}, kFloat64);
  const Tensor pw64 = rand({3}, kFloat64) + 0.5;
  for (Dtype d : kFloatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor a = a64.to(d), b = b64.to(d), p = p64.to(d), y = y64.to(d), pw = pw64.to(d);
    const auto av = a.to_vector<double>(), bv = b.to_vector<double>(), pv = p.to_vector<double>(),
               yv = y.to_vector<double>(), wv = pw.to_vector<double>();
    std::vector<double> mse(12), bce(12), bcel(12), bcel_pw(12);
    for (size_t i = 0; i < 12; ++i) {
      mse[i] = (av[i] - bv[i]) * (av[i] - bv[i]);
      bce[i] = -(yv[i] * std::log(pv[i]) + (1 - yv[i]) * std::log(1 - pv[i]));
      const double s = 1 / (1 + std::exp(-av[i]));
      bcel[i] = -(yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s));
      bcel_pw[i] = -(wv[i % 3] * yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s));
    }
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      auto ref = [&](const std::vector<double>& v) {
        return r == Reduction::None ? tensor(v, {4, 3}) : reduce_ref(v, r, 12);
      };
      check_close(mse_loss(a, b, r), ref(mse), loose(d));
      check_close(binary_cross_entropy(p, y, r), ref(bce), loose(d));
      check_close(binary_cross_entropy_with_logits(a, y, r), ref(bcel), loose(d));
      check_close(binary_cross_entropy_with_logits(a, y, r, pw), ref(bcel_pw), loose(d));
      CHECK(mse_loss(a, b, r).dtype() == d);
    }
    check_close(mse_loss(non_contiguous(a), non_contiguous(b), Reduction::Sum), reduce_ref(mse, Reduction::Sum, 12),
                loose(d));
  }
  // mse broadcasts the target (PyTorch warns; halfgrad allows it).
  check_close(mse_loss(a64, b64.select(0, 0), Reduction::Sum),
              ((a64 - b64.select(0, 0)) * (a64 - b64.select(0, 0))).sum());
  // Extremes: the stable logits form and the -100 clamp keep every loss finite.
  Tensor xl = tensor(std::vector<float>{100, -100});
  auto l = binary_cross_entropy_with_logits(xl, tensor(std::vector<float>{0, 1}), Reduction::None).to_vector<float>();
  CHECK(l == std::vector<float>{100, 100});
  auto c = binary_cross_entropy(tensor(std::vector<float>{0, 1}), tensor(std::vector<float>{1, 0}), Reduction::None)
               .to_vector<float>();
  CHECK(c == std::vector<float>{100, 100});
  CHECK(std::isnan(mse_loss(zeros({0}), zeros({0})).item<float>()));  // mean of nothing, as PyTorch
}

TEST_CASE("pointwise loss gradients match finite differences") {
  manual_seed(17);
  using autograd::gradcheck;
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    CHECK(gradcheck([r](const TensorList& x) { return mse_loss(x[0], x[1], r); }, {randn({3, 4}), randn({3, 4})}));
    CHECK(gradcheck([r](const TensorList& x) { return binary_cross_entropy(x[0], x[1], r); },
                    {rand({3, 4}) * 0.8 + 0.1, rand({3, 4})}));
    CHECK(gradcheck([r](const TensorList& x) { return binary_cross_entropy_with_logits(x[0], x[1], r); },
                    {randn({3, 4}), rand({3, 4})}));
    CHECK(gradcheck([r](const TensorList& x) { return binary_cross_entropy_with_logits(x[0], x[1], r, x[2]); },
                    {randn({3, 4}), rand({3, 4}), rand({4}) + 0.5}));
  }
  CHECK(gradcheck([](const TensorList& x) { return mse_loss(x[0], x[1]); }, {randn({3, 4}), randn({4})}));
}

TEST_CASE("pointwise loss errors") {
  check_error(
      [] {
        binary_cross_entropy(tensor(std::vector<float>{0.5f, 1.5f}), zeros({2}));
      },
      {"[binary_cross_entropy]", "between 0 and 1"});
  check_error([] { binary_cross_entropy(zeros({2}), zeros({3})); }, {"[binary_cross_entropy]", "[3]", "[2]"});
  check_error(
      [] {
        binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), Reduction::Mean, ones({2}));
      },
      {"[binary_cross_entropy_with_logits]", "pos_weight", "[2]", "[2, 3]"});
  check_error([] { mse_loss(zeros({2, 3}), zeros({4})); }, {"[mse_loss]", "[2, 3]", "[4]"});
  check_error([] { mse_loss(zeros({2}, kInt64), zeros({2})); }, {"[mse_loss]", "int64"});
}

TEST_CASE("the rows' vector exp (exp_shifted_row) is within 2 ULPs of exp, with its sum, at every tail length") {
  // Shifted rows: values at or below 0 down past the underflow, a few a rounding above 0 (a
  // value against its row's log-sum-exp), -inf (0), and NaN (kept: a NaN logit must give a NaN
  // gradient, or GradScaler would not see the step go bad).
  std::mt19937 gen(31);
  std::uniform_real_distribution<float> below(-110.0f, 0.0f);
  for (int64_t n = 1; n <= 40; ++n) {
    CAPTURE(n);
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n) + 1, 7.0f);
    for (auto& v : x) v = below(gen);
    x[0] = 0.0f;
    if (n > 2) x[1] = 3e-7f;
    const float sum = cpu::exp_shifted_row(x.data(), 0.5f, y.data(), n);
    CHECK(y[static_cast<size_t>(n)] == 7.0f);  // nothing written past the row
    double ref_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double ref = std::exp(static_cast<double>(x[static_cast<size_t>(i)] - 0.5f));  // the float difference
      ref_sum += ref;
      const float got = y[static_cast<size_t>(i)];
      CHECK(std::abs(got - ref) <= 2.0 * std::max(ref * FLT_EPSILON, static_cast<double>(FLT_TRUE_MIN)));
    }
    CHECK(std::abs(sum - ref_sum) <= 1e-6 * ref_sum + 1e-30);
  }
  const float special[] = {-INFINITY, NAN, -1000.0f, 0.0f};
  float out[4];
  cpu::exp_shifted_row(special, 0.0f, out, 4);
  CHECK(out[0] == 0.0f);
  CHECK(std::isnan(out[1]));
  CHECK(out[2] == 0.0f);
  CHECK(out[3] == 1.0f);
}

TEST_CASE("softmax, log_softmax and cross_entropy rows of every short length match float64") {
  // Rows of 1 to 40 classes (one masked vector and the tails after full ones), with -inf
  // entries, and a NaN logit reaching the loss and the whole row of its gradient.
  manual_seed(32);
  for (int64_t c = 1; c <= 40; c += 3) {
    CAPTURE(c);
    Tensor x = randn({9, c}) * 4.0;
    if (c > 1) x.index_put_({2, 0}, full({}, -INFINITY));
    check_close(softmax(x, 1), softmax_ref(x, 1, false), Tolerance{1e-5, 1e-6});
    check_close(log_softmax(x, 1), softmax_ref(x, 1, true), Tolerance{1e-5, 1e-5});
    const Tensor logits = x.narrow(0, 3, 6).detach().requires_grad_(true);
    const Tensor target = randint(0, c, {6});
    const Tensor loss = cross_entropy(logits, target);
    const Tensor logits64 = logits.detach().to(kFloat64).requires_grad_(true);
    const Tensor loss64 = cross_entropy(logits64, target);
    check_close(loss, loss64, Tolerance{1e-5, 1e-6});
    loss.backward();
    loss64.backward();
    check_close(logits.grad(), logits64.grad(), Tolerance{1e-5, 1e-6});
  }
  Tensor bad = randn({4, 10});
  bad.index_put_({1, 3}, full({}, NAN));
  const Tensor logits = bad.requires_grad_(true);
  const Tensor loss = cross_entropy(logits, tensor(std::vector<int64_t>{0, 1, 2, 3}, {4}));
  CHECK(std::isnan(loss.item<float>()));
  loss.backward();
  const auto g = logits.grad().to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(std::isnan(g[i]) == (i / 10 == 1));  // the NaN row's, all of them
}
