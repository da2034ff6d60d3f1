// scaled_dot_product_attention against the composite softmax(q k^T * scale + mask) v computed with
// halfgrad's own ops in float64: forward and gradients in every float dtype, masks (bool, additive,
// broadcast), causal, dropout, empty inputs, autocast, gradchecks and bad input.
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::Tolerance;

namespace {

// The composite reference in the dtype of its inputs. mask: bool (true = attend) or additive.
Tensor sdpa_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                std::optional<double> scale_in = std::nullopt) {
  const double scale = scale_in.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  Tensor s = matmul(q, k.transpose(-1, -2)) * scale;
  const int64_t L = q.size(2), S = k.size(2);
  if (causal) {
    std::vector<uint8_t> m(static_cast<size_t>(L * S));
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) m[static_cast<size_t>(i * S + j)] = j > i;
    s = masked_fill(s, tensor(m, {L, S}).to(kBool), -INFINITY);
  }
  if (mask.defined()) {
    if (mask.dtype() == kBool)
      s = masked_fill(s, eq(mask, zeros({}, TensorOptions(kBool))), -INFINITY);
    else
      s = s + mask;
  }
  return matmul(softmax(s, -1), v);
}

Tensor randn64(const Shape& shape) { return randn(shape, TensorOptions(kFloat64)); }

// A bool mask of `shape` with about a quarter false, but never a whole row of the last dim false.
Tensor random_bool_mask(const Shape& shape) {
  Tensor r = rand(shape, TensorOptions(kFloat64));
  auto v = r.to_vector<double>();
  const int64_t S = shape.back();
  std::vector<uint8_t> m(v.size());
  for (size_t x = 0; x < v.size(); ++x) m[x] = v[x] > 0.25 || static_cast<int64_t>(x) % S == 0;
  return tensor(m, shape).to(kBool);
}

Tolerance tol_for(Dtype d) {
  switch (d) {
    case kFloat64: return {1e-10, 1e-10};
    case kFloat32: return {2e-5, 2e-5};
    case kFloat16: return {4e-3, 4e-3};
    default: return {3e-2, 3e-2};
  }
}

struct Case {
  int64_t B, H, L, S, E, Ev;
  int mask;  // 0 none, 1 bool [L, S], 2 additive [B, 1, L, S], 3 additive [S]
  bool causal;
};
constexpr Case kCases[] = {
    {2, 3, 5, 7, 4, 6, 0, false},
    {2, 3, 5, 7, 4, 6, 1, false},
    {2, 3, 5, 7, 4, 6, 2, false},
    {1, 2, 4, 9, 3, 3, 3, false},
    {2, 2, 6, 6, 5, 4, 0, true},
    {1, 2, 5, 8, 4, 4, 0, true},
    {1, 1, 70, 70, 8, 8, 0, true},  // more than one block of query rows
    // Several blocks of query rows with more queries than keys (causal rows past the last key)
    // and fewer, under each kind of mask.
    {1, 2, 130, 75, 8, 5, 0, true},
    {1, 1, 70, 140, 6, 9, 2, false},
    {2, 1, 129, 129, 4, 4, 3, false},
    {1, 1, 100, 60, 4, 4, 1, false},
};

Tensor make_mask(const Case& c) {
  if (c.mask == 1) return random_bool_mask({c.L, c.S});
  if (c.mask == 2) return randn64({c.B, 1, c.L, c.S});
  if (c.mask == 3) return randn64({c.S});
  return Tensor();
}

}  // namespace

TEST_CASE("scaled_dot_product_attention matches the composite in every float dtype, forward and backward") {
  manual_seed(11);
  for (const Case& c : kCases) {
    const Tensor q0 = randn64({c.B, c.H, c.L, c.E}), k0 = randn64({c.B, c.H, c.S, c.E}),
                 v0 = randn64({c.B, c.H, c.S, c.Ev}), g0 = randn64({c.B, c.H, c.L, c.Ev});
    const Tensor mask0 = make_mask(c);
    for (Dtype d : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
      CAPTURE(d);
      CAPTURE(c.L);
      CAPTURE(c.mask);
      CAPTURE(c.causal);
      // The reference sees the same rounded inputs, in float64.
      Tensor q = q0.detach().to(d).requires_grad_(), k = k0.detach().to(d).requires_grad_(),
             v = v0.detach().to(d).requires_grad_();
      const Tensor mask = mask0.defined() && mask0.dtype() != kBool ? mask0.to(d) : mask0;
      Tensor out = scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal);
      CHECK(out.dtype() == d);
      CHECK(out.shape() == Shape{c.B, c.H, c.L, c.Ev});
      Tensor qr = q.detach().to(kFloat64).requires_grad_(), kr = k.detach().to(kFloat64).requires_grad_(),
             vr = v.detach().to(kFloat64).requires_grad_();
      const Tensor maskr = mask.defined() && mask.dtype() != kBool ? mask.to(kFloat64) : mask;
      Tensor ref = sdpa_ref(qr, kr, vr, maskr, c.causal);
      check_close(out, ref, tol_for(d));
      (out * g0.to(d)).sum().backward();
      (ref * g0).sum().backward();
      const Tolerance gt = d == kFloat64 ? Tolerance{1e-9, 1e-9} : tol_for(d);
      check_close(q.grad(), qr.grad(), {gt.atol * 4, gt.rtol * 4});
      check_close(k.grad(), kr.grad(), {gt.atol * 4, gt.rtol * 4});
      check_close(v.grad(), vr.grad(), {gt.atol * 4, gt.rtol * 4});
    }
  }
}

TEST_CASE("scaled_dot_product_attention: non-contiguous inputs, a custom scale and broadcast masks") {
  manual_seed(12);
  // [B, L, H, E] transposed to [B, H, L, E], as multi-head attention makes them.
  const Tensor q = randn64({2, 5, 3, 4}).transpose(1, 2), k = randn64({2, 6, 3, 4}).transpose(1, 2),
               v = randn64({2, 6, 3, 2}).transpose(1, 2);
  REQUIRE(!q.is_contiguous());
  check_close(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, 0.3),
              sdpa_ref(q, k, v, Tensor(), false, 0.3));
  const Tensor m = random_bool_mask({2, 1, 1, 6});
  check_close(scaled_dot_product_attention(q, k, v, m), sdpa_ref(q, k, v, m, false));
  const Tensor a = randn64({3, 5, 1});
  check_close(scaled_dot_product_attention(q, k, v, a), sdpa_ref(q, k, v, a, false));
  // The op hands strided inputs to the kernels as they are (and saves them so): their gradients
  // equal those of contiguous copies.
  auto grads = [&](bool strided) {
    std::vector<Tensor> xs;
    for (const Tensor& t : {q, k, v}) xs.push_back((strided ? t : t.contiguous()).detach().requires_grad_());
    scaled_dot_product_attention(xs[0], xs[1], xs[2], Tensor(), 0.0, true).sum().backward();
    return std::vector<Tensor>{xs[0].grad(), xs[1].grad(), xs[2].grad()};
  };
  // The output's memory is [B, L, H, Ev] (as PyTorch's flash attention): merging heads is a view.
  CHECK(scaled_dot_product_attention(q, k, v).transpose(1, 2).is_contiguous());
  const auto gs = grads(true), gc = grads(false);
  for (size_t x = 0; x < gs.size(); ++x) check_close(gs[x], gc[x], {0, 0});
}

TEST_CASE("scaled_dot_product_attention gradchecks in float64 (plain, causal, bool and additive masks)") {
  using autograd::gradcheck;
  manual_seed(13);
  const Tensor q = randn64({1, 2, 3, 4}), k = randn64({1, 2, 5, 4}), v = randn64({1, 2, 5, 3});
  CHECK(gradcheck([](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2]); }, {q, k, v}));
  const Tensor kc = randn64({1, 2, 3, 4}), vc = randn64({1, 2, 3, 3});
  CHECK(
      gradcheck([](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.0, true); },
                {q, kc, vc}));
  const Tensor bm = random_bool_mask({3, 5});
  CHECK(gradcheck([&](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], bm); }, {q, k, v}));
  // The additive mask broadcasts over batch and heads; its gradient is summed back.
  CHECK(gradcheck([](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3]); },
                  {q, k, v, randn64({3, 5})}));
  // Two blocks of query rows with dropout: causal, and under an additive mask (its gradient too).
  const Tensor ql = randn64({1, 1, 70, 2}), kl = randn64({1, 1, 70, 2}), vl = randn64({1, 1, 70, 2});
  CHECK(gradcheck(
      [](const TensorList& t) {
        manual_seed(98);
        return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.3, true);
      },
      {ql, kl, vl}));
  CHECK(gradcheck(
      [](const TensorList& t) {
        manual_seed(97);
        return scaled_dot_product_attention(t[0], t[1], t[2], t[3], 0.3);
      },
      {ql, kl, vl, randn64({70, 70})}));
  // With dropout the mask is fixed by re-seeding, so the finite differences see the same one.
  CHECK(gradcheck(
      [](const TensorList& t) {
        manual_seed(99);
        return scaled_dot_product_attention(t[0], t[1], t[2], Tensor(), 0.4);
      },
      {q, k, v}));
}

TEST_CASE("scaled_dot_product_attention dropout drops weights with probability p and rescales the rest") {
  // q = 0 gives uniform weights 1/S; v = identity makes out[i, c] = weight (i, c) after dropout.
  const int64_t S = 64, L = 40;
  const double p = 0.3;
  const Tensor q = zeros({1, 1, L, 4}), k = randn({1, 1, S, 4});
  Tensor eye = zeros({S, S});
  for (int64_t j = 0; j < S; ++j) eye.slice(0, j, j + 1).slice(1, j, j + 1).fill_(1.0);
  const Tensor v = eye.reshape({1, 1, S, S});
  manual_seed(5);
  const Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), p);
  const double keep = 1.0 / ((1.0 - p) * static_cast<double>(S));
  int64_t kept = 0;
  bool only_two_values = true;
  for (double x : out.to_vector<double>()) {
    if (std::abs(x - keep) < 1e-6)
      ++kept;
    else if (x != 0.0)
      only_two_values = false;
  }
  CHECK(only_two_values);
  const double n = static_cast<double>(S * L), frac = static_cast<double>(kept) / n;
  CHECK(std::abs(frac - (1.0 - p)) < 4.0 * std::sqrt(p * (1.0 - p) / n));
  manual_seed(5);
  check_close(scaled_dot_product_attention(q, k, v, Tensor(), p), out, {0, 0});  // reproducible
  CHECK((scaled_dot_product_attention(q, k, v, Tensor(), p) - out).abs().sum().item<double>() > 0);
}

TEST_CASE("scaled_dot_product_attention: empty inputs, fully masked rows, autocast") {
  CHECK(scaled_dot_product_attention(zeros({2, 3, 0, 4}), zeros({2, 3, 5, 4}), zeros({2, 3, 5, 6})).shape() ==
        Shape{2, 3, 0, 6});
  CHECK(scaled_dot_product_attention(zeros({0, 3, 2, 4}), zeros({0, 3, 5, 4}), zeros({0, 3, 5, 6})).numel() == 0);
  // A query row with every key masked gives zeros (and no NaN in the gradients).
  Tensor q = randn({1, 1, 2, 4}).requires_grad_();
  const Tensor k = randn({1, 1, 3, 4}), v = randn({1, 1, 3, 2});
  const Tensor m = tensor(std::vector<uint8_t>{0, 0, 0, 1, 0, 1}, {2, 3}).to(kBool);
  const Tensor out = scaled_dot_product_attention(q, k, v, m);
  check_close(out.slice(2, 0, 1), zeros({1, 1, 1, 2}), {0, 0});
  check_close(out.slice(2, 1, 2), sdpa_ref(q.detach().slice(2, 1, 2), k, v, m.slice(0, 1, 2), false));
  out.sum().backward();
  for (double g : q.grad().to_vector<double>()) CHECK(std::isfinite(g));
  // Under bfloat16 autocast the op runs in bfloat16 (lower precision), from float32 inputs.
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    const Tensor y = scaled_dot_product_attention(randn({1, 2, 3, 4}), randn({1, 2, 3, 4}), randn({1, 2, 3, 4}));
    CHECK(y.dtype() == kBFloat16);
  }
}

TEST_CASE("scaled_dot_product_attention rejects bad input") {
  const Tensor q = randn({2, 3, 4, 8}), k = randn({2, 3, 5, 8}), v = randn({2, 3, 5, 6});
  auto sdpa = [](auto&&... a) { return scaled_dot_product_attention(a...); };
  check_error([&] { sdpa(randn({3, 4, 8}), k, v); }, {"[scaled_dot_product_attention]", "4-d"});
  check_error([&] { sdpa(q, randn({1, 3, 5, 8}), v); }, {"[scaled_dot_product_attention]", "batch sizes differ"});
  check_error([&] { sdpa(q, k, randn({2, 2, 5, 6})); }, {"[scaled_dot_product_attention]", "head counts differ"});
  check_error([&] { sdpa(q, randn({2, 3, 5, 7}), v); }, {"[scaled_dot_product_attention]", "embedding dims differ"});
  check_error([&] { sdpa(q, k, randn({2, 3, 4, 6})); }, {"[scaled_dot_product_attention]", "sequence lengths"});
  check_error([&] { sdpa(q, k.to(kFloat64), v); }, {"[scaled_dot_product_attention]", "one floating dtype"});
  check_error([&] { sdpa(q, k, v, randn({4, 4})); }, {"[scaled_dot_product_attention]", "does not broadcast"});
  check_error([&] { sdpa(q, k, v, randn({1, 2, 3, 4, 5})); }, {"[scaled_dot_product_attention]", "does not broadcast"});
  check_error([&] { sdpa(q, k, v, zeros({4, 5}, TensorOptions(kInt64))); }, {"[scaled_dot_product_attention]", "bool"});
  check_error([&] { sdpa(q, k, v, randn({4, 5}), 0.0, true); }, {"[scaled_dot_product_attention]", "is_causal"});
  check_error([&] { sdpa(q, k, v, Tensor(), 1.0); }, {"[scaled_dot_product_attention]", "dropout_p"});
  check_error([&] { sdpa(q, k, v, Tensor(), 0.0, false, INFINITY); }, {"[scaled_dot_product_attention]", "scale"});
}
