// The flash-attention algorithm of the CUDA kernels, as modelled on the CPU by flash_reference.h,
// against the unfused composition (matmul, mask, softmax, matmul, and autograd's gradients) in
// float32 over the same 16-bit inputs: long sequences, every head dim the kernels are built for
// (and padded ones), causal, bool and additive masks, L != S, strided q/k/v and a fully masked row.
#include <cmath>

#include "flash_reference.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
namespace flash_ref = hg::test::flash_ref;

namespace {

struct Unfused {
  Tensor out, lse, dq, dk, dv;
};

// The composition in float32, with the gradients of sum(out * go).
Unfused unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, double scale,
                const Tensor& go) {
  const Tensor qf = q.to(kFloat32).detach().requires_grad_(), kf = k.to(kFloat32).detach().requires_grad_(),
               vf = v.to(kFloat32).detach().requires_grad_();
  Tensor s = matmul(qf, kf.transpose(-1, -2)) * scale;
  const int64_t L = q.size(2), S = k.size(2);
  if (causal) s = masked_fill(s, eq(tril(ones({L, S})), zeros({})), -INFINITY);
  if (mask.defined() && mask.dtype() == kBool) s = masked_fill(s, eq(mask, zeros({}, TensorOptions(kBool))), -INFINITY);
  if (mask.defined() && mask.dtype() != kBool) s = s + mask.to(kFloat32);
  const Tensor out = matmul(softmax(s, -1), vf);
  (out * go.to(kFloat32)).sum().backward();
  return {out.detach(), logsumexp(s.detach(), {-1}), qf.grad(), kf.grad(), vf.grad()};
}

// max |a - b| / max |b|: the kernels round P and dS to 16 bits, so elementwise relative errors of
// tiny entries mean little; the error against the largest entry is what the rounding bounds.
double rel_err(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return den > 0 ? num / den : num;
}

struct FlashCase {
  int64_t B, H, L, S, E, Ev;
  int mask;  // 0 none, 1 bool [L, S], 2 additive [B, 1, L, S]
  bool causal;
  bool strided;  // q, k, v as views of one [B, T, 3, H, E] tensor (L == S, E == Ev)
  Dtype dtype;
};

// About 30% false, never a whole row (key 0 always attended).
Tensor bool_mask(int64_t L, int64_t S) {
  const auto r = rand({L, S}).to_vector<float>();
  std::vector<uint8_t> m(r.size());
  for (size_t x = 0; x < r.size(); ++x) m[x] = r[x] > 0.3f || static_cast<int64_t>(x) % S == 0;
  return tensor(m, {L, S}).to(kBool);
}

Tensor make_input(const FlashCase& c, int64_t n, int64_t e, Dtype d) { return (randn({c.B, c.H, n, e}) * 1.5).to(d); }

template <class T>
void check_case(const FlashCase& c) {
  CAPTURE(c.L);
  CAPTURE(c.S);
  CAPTURE(c.E);
  CAPTURE(c.Ev);
  CAPTURE(c.mask);
  CAPTURE(c.causal);
  CAPTURE(c.strided);
  CAPTURE(c.dtype);
  Tensor q, k, v;
  if (c.strided) {
    const Tensor qkv = randn({c.B, c.L, 3, c.H, c.E}).to(c.dtype);  // the layout of a fused projection
    q = transpose(select(qkv, 2, 0), 1, 2);
    k = transpose(select(qkv, 2, 1), 1, 2);
    v = transpose(select(qkv, 2, 2), 1, 2);
    REQUIRE(!q.is_contiguous());
  } else {
    q = make_input(c, c.L, c.E, c.dtype);
    k = make_input(c, c.S, c.E, c.dtype);
    v = make_input(c, c.S, c.Ev, c.dtype);
  }
  Tensor mask;
  if (c.mask == 1) mask = bool_mask(c.L, c.S);
  if (c.mask == 2) mask = randn({c.B, 1, c.L, c.S});
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
  const Tensor go = randn({c.B, c.H, c.L, c.Ev}).to(c.dtype);

  const flash_ref::Forward f = flash_ref::forward<T>(q, k, v, mask, c.causal, scale);
  const flash_ref::Grads g = flash_ref::backward<T>(q, k, v, mask, c.causal, scale, f.out, f.lse, go);
  const Unfused u = unfused(q, k, v, mask, c.causal, scale, go);
  // One 16-bit rounding of the output, P and dS (2^-8 for bfloat16, 2^-11 for float16), plus sums.
  const double tol = c.dtype == kBFloat16 ? 1.2e-2 : 2e-3;
  CHECK(f.out.dtype() == c.dtype);
  CHECK(rel_err(f.out, u.out) < tol);
  check_close(f.lse, u.lse, {1e-4, 1e-5});
  CHECK(rel_err(g.dq, u.dq) < 2 * tol);
  CHECK(rel_err(g.dk, u.dk) < 2 * tol);
  CHECK(rel_err(g.dv, u.dv) < tol);
}

void check_case(const FlashCase& c) {
  if (c.dtype == kBFloat16)
    check_case<BFloat16>(c);
  else
    check_case<Half>(c);
}

}  // namespace

TEST_CASE("flash reference: every head dim at L = S = 1024, causal, bool and additive masks") {
  manual_seed(41);
  for (int64_t E : {32, 64, 96, 128}) {
    for (int mask = 0; mask < 3; ++mask) check_case({1, 1, 1024, 1024, E, E, mask, false, false, kBFloat16});
    check_case({1, 1, 1024, 1024, E, E, 0, true, false, kBFloat16});
  }
}

TEST_CASE("flash reference: float16, padded head dims, L != S, several heads, strided inputs") {
  manual_seed(42);
  check_case({1, 1, 1024, 1024, 64, 64, 0, true, false, kFloat16});
  check_case({1, 1, 1024, 1024, 128, 128, 2, false, false, kFloat16});
  check_case({1, 1, 1030, 1030, 40, 40, 1, false, false, kBFloat16});  // dim 40 runs padded to 64, tails
  check_case({1, 1, 300, 1100, 72, 24, 0, false, false, kBFloat16});   // E != Ev, L < S
  check_case({1, 1, 1100, 300, 16, 16, 0, true, false, kBFloat16});    // L > S, causal
  check_case({2, 3, 200, 130, 64, 64, 2, false, false, kBFloat16});    // a [B, 1, L, S] mask
  check_case({2, 2, 1024, 1024, 64, 64, 0, true, true, kBFloat16});    // q, k, v strided views
}

TEST_CASE("flash reference: a fully masked row gives zeros, lse -inf and no gradient, as the op") {
  const Tensor q = randn({1, 1, 70, 32}).to(kBFloat16), k = randn({1, 1, 70, 32}).to(kBFloat16),
               v = randn({1, 1, 70, 32}).to(kBFloat16), go = randn({1, 1, 70, 32}).to(kBFloat16);
  std::vector<uint8_t> m(70 * 70, 1);
  for (int64_t j = 0; j < 70; ++j) m[static_cast<size_t>(65 * 70 + j)] = 0;  // row 65, in the second block
  const Tensor mask = tensor(m, {70, 70}).to(kBool);
  const flash_ref::Forward f = flash_ref::forward<BFloat16>(q, k, v, mask, false, 0.2);
  const flash_ref::Grads g = flash_ref::backward<BFloat16>(q, k, v, mask, false, 0.2, f.out, f.lse, go);
  CHECK(std::isinf(f.lse.to_vector<float>()[65]));
  for (float x : select(select(f.out, 2, 65), 1, 0).to_vector<float>()) CHECK(x == 0.0f);
  for (float x : select(select(g.dq, 2, 65), 1, 0).to_vector<float>()) CHECK(x == 0.0f);
  const Tensor qr = q.detach().requires_grad_();
  const Tensor out = scaled_dot_product_attention(qr, k, v, mask, 0.0, false, 0.2);
  CHECK(rel_err(f.out, out) < 1.2e-2);
}
