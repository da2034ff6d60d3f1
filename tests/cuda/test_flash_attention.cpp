// The CUDA flash-attention kernels (float16/bfloat16, kernels/cuda/flash_attention_*.cu) against
// the CPU model of their algorithm (tests/cpu/flash_reference.h, tight: same tiles and roundings)
// and against the CPU op (looser: float32 throughout): forward, lse, dq/dk/dv at 1024+ for every
// head dim and mask kind, L != S, padded dims, strided inputs, and bit-identical gradients over
// two runs. Written without a GPU: first to run in a GPU session.
#include <cstring>

#include "../cpu/flash_reference.h"
#include "framework/ops/attention_kernels.h"
#include "helpers.h"
#include "kernels/cuda/flash_attention.h"

// The route check is an internal of libhalfgrad_cuda: without a CUDA build there is nothing to link.
#ifdef HG_WITH_CUDA

using namespace hg;
namespace flash_ref = hg::test::flash_ref;

namespace {

struct FlashCase {
  int64_t B, H, L, S, E, Ev;
  int mask;  // 0 none, 1 bool [L, S], 2 additive [B, 1, L, S] (no gradient)
  bool causal;
  bool strided;  // q, k, v as views of one [B, T, 3, H, E] CUDA tensor (L == S, E == Ev)
  Dtype dtype;
};

// max |a - b| / max |b| (see tests/cpu/test_flash_reference.cpp).
double rel_err(const Tensor& a, const Tensor& b) {
  const auto x = a.to(kCPU).to_vector<double>(), y = b.to(kCPU).to_vector<double>();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return den > 0 ? num / den : num;
}

Tensor bool_mask(int64_t L, int64_t S) {  // about 30% false, key 0 always attended
  const auto r = rand({L, S}).to_vector<float>();
  std::vector<uint8_t> m(r.size());
  for (size_t x = 0; x < r.size(); ++x) m[x] = r[x] > 0.3f || static_cast<int64_t>(x) % S == 0;
  return tensor(m, {L, S}).to(kBool);
}

struct FlashInputs {
  Tensor q, k, v, mask, go;  // on CUDA (q, k, v leaves requiring grad)
};

FlashInputs make_inputs(const FlashCase& c) {
  FlashInputs in;
  if (c.strided) {
    const Tensor qkv = randn({c.B, c.L, 3, c.H, c.E}).to(c.dtype).to(kCUDA);
    in.q = transpose(select(qkv, 2, 0), 1, 2);
    in.k = transpose(select(qkv, 2, 1), 1, 2);
    in.v = transpose(select(qkv, 2, 2), 1, 2);
    REQUIRE(!in.q.is_contiguous());
  } else {
    in.q = (randn({c.B, c.H, c.L, c.E}) * 1.5).to(c.dtype).to(kCUDA);
    in.k = (randn({c.B, c.H, c.S, c.E}) * 1.5).to(c.dtype).to(kCUDA);
    in.v = randn({c.B, c.H, c.S, c.Ev}).to(c.dtype).to(kCUDA);
  }
  if (c.mask == 1) in.mask = bool_mask(c.L, c.S).to(kCUDA);
  if (c.mask == 2) in.mask = randn({c.B, 1, c.L, c.S}).to(kCUDA);
  in.go = randn({c.B, c.H, c.L, c.Ev}).to(c.dtype).to(kCUDA);
  return in;
}

AttentionArgs flash_args(const FlashInputs& in, bool causal, double scale) {
  AttentionArgs a;
  a.q = in.q;
  a.k = in.k;
  a.v = in.v;
  if (in.mask.defined()) {
    const Tensor m = in.mask.dtype() == kBool ? in.mask : in.mask.to(kFloat32);
    a.mask = expand(m, {in.q.size(0), in.q.size(1), in.q.size(2), in.k.size(2)});
  }
  a.scale = scale;
  a.causal = causal;
  return a;
}

// Gradients of sum(out * go) through the op on q, k, v's device.
std::vector<Tensor> op_grads(const FlashInputs& in, Device dev, bool causal, double scale) {
  std::vector<Tensor> xs;
  for (const Tensor& t : {in.q, in.k, in.v}) xs.push_back(t.to(dev).detach().requires_grad_());
  const Tensor m = in.mask.defined() ? in.mask.to(dev) : Tensor();
  const Tensor y = scaled_dot_product_attention(xs[0], xs[1], xs[2], m, 0.0, causal, scale);
  (y.to(kFloat32) * in.go.to(dev).to(kFloat32)).sum().backward();
  return {y.detach(), xs[0].grad(), xs[1].grad(), xs[2].grad()};
}

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
  const FlashInputs in = make_inputs(c);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
  const AttentionArgs args = flash_args(in, c.causal, scale);
  REQUIRE(cuda::flash_attention_supported(args));

  // Forward through the stub, for the lse.
  Tensor out = empty({c.B, c.H, c.L, c.Ev}, TensorOptions(c.dtype).device(kCUDA));
  Tensor lse = empty({c.B, c.H, c.L}, TensorOptions(kFloat32).device(kCUDA));
  attention_stub(kCUDA, out, lse, args);
  const Tensor qc = in.q.to(kCPU), kc = in.k.to(kCPU), vc = in.v.to(kCPU), goc = in.go.to(kCPU);
  const Tensor mc = in.mask.defined() ? in.mask.to(kCPU) : Tensor();
  const flash_ref::Forward f = flash_ref::forward<T>(qc, kc, vc, mc, c.causal, scale);
  const flash_ref::Grads g = flash_ref::backward<T>(qc, kc, vc, mc, c.causal, scale, f.out, f.lse, goc);
  // Same algorithm, another summation order inside the products: within a last-bit rounding of
  // the 16-bit output (up to 2 units of 2^-8, bfloat16, at the bottom of a binade) and of P and
  // dS for the gradients.
  const double ulp = c.dtype == kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
  CHECK(rel_err(out, f.out) < 2.5 * ulp);
  hg::test::check_close(lse.to(kCPU), f.lse, {2e-5, 2e-5});

  const auto gpu = op_grads(in, kCUDA, c.causal, scale);
  CHECK(rel_err(gpu[0], f.out) < 2.5 * ulp);
  CHECK(rel_err(gpu[1], g.dq) < 4 * ulp);
  CHECK(rel_err(gpu[2], g.dk) < 4 * ulp);
  CHECK(rel_err(gpu[3], g.dv) < 4 * ulp);
  // Against the CPU op (float32 weights, no 16-bit P or dS): as the model against the composition.
  const auto cpu = op_grads(in, kCPU, c.causal, scale);
  for (size_t x = 0; x < cpu.size(); ++x) {
    CAPTURE(x);
    CHECK(rel_err(gpu[x], cpu[x]) < (x == 0 || x == 3 ? 3 : 6) * ulp);
  }
  // Deterministic: a second backward gives the same bits.
  const auto again = op_grads(in, kCUDA, c.causal, scale);
  for (size_t x = 1; x < gpu.size(); ++x) {
    const Tensor a = gpu[x].to(kCPU).contiguous(), b = again[x].to(kCPU).contiguous();
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * 2) == 0);
  }
}

void check_case(const FlashCase& c) {
  if (c.dtype == kBFloat16)
    check_case<BFloat16>(c);
  else
    check_case<Half>(c);
}

}  // namespace

TEST_CASE("cuda flash attention: every head dim at L = S = 1024, causal, bool and additive masks") {
  manual_seed(43);
  for (int64_t E : {32, 64, 96, 128}) {
    for (int mask = 0; mask < 3; ++mask) check_case({1, 2, 1024, 1024, E, E, mask, false, false, kBFloat16});
    check_case({1, 2, 1024, 1024, E, E, 0, true, false, kBFloat16});
  }
}

TEST_CASE("cuda flash attention: float16, padded head dims, L != S, batches, strided inputs") {
  manual_seed(44);
  check_case({1, 2, 1024, 1024, 64, 64, 0, true, false, kFloat16});
  check_case({1, 1, 1024, 1024, 128, 128, 2, false, false, kFloat16});
  check_case({1, 1, 1030, 1030, 40, 40, 1, false, false, kBFloat16});
  check_case({1, 1, 300, 1100, 72, 24, 0, false, false, kBFloat16});
  check_case({1, 1, 1100, 300, 16, 16, 0, true, false, kBFloat16});
  check_case({2, 3, 200, 130, 64, 64, 2, false, false, kBFloat16});
  check_case({2, 2, 1024, 1024, 64, 64, 0, true, true, kBFloat16});
  check_case({2, 2, 1024, 1024, 36, 36, 0, true, true, kFloat16});  // strided, rows not in 16-byte chunks
}

TEST_CASE("cuda flash attention: routes, a fully masked row, the mask gradient through the fallback") {
  manual_seed(45);
  const Tensor q = randn({1, 1, 70, 32}).to(kBFloat16).to(kCUDA);
  AttentionArgs a;
  a.q = a.k = a.v = q;
  CHECK(cuda::flash_attention_supported(a));
  a.dropout_p = 0.1;
  CHECK_FALSE(cuda::flash_attention_supported(a));  // dropout: the fallback's draws
  a.dropout_p = 0.0;
  a.q = a.k = a.v = q.to(kFloat32);
  CHECK_FALSE(cuda::flash_attention_supported(a));
  a.q = a.k = a.v = randn({1, 1, 8, 160}).to(kBFloat16).to(kCUDA);
  CHECK_FALSE(cuda::flash_attention_supported(a));  // head dim over 128

  // A row with every key masked: zeros and no gradient, as the fallback.
  std::vector<uint8_t> m(70 * 70, 1);
  for (int64_t j = 0; j < 70; ++j) m[static_cast<size_t>(65 * 70 + j)] = 0;
  const Tensor mask = tensor(m, {70, 70}).to(kBool).to(kCUDA);
  const Tensor qg = q.detach().requires_grad_();
  const Tensor y = scaled_dot_product_attention(qg, q, q, mask);
  y.to(kFloat32).sum().backward();
  for (float x : select(select(y, 2, 65), 1, 0).to(kCPU).to_vector<float>()) CHECK(x == 0.0f);
  for (float x : select(select(qg.grad(), 2, 65), 1, 0).to(kCPU).to_vector<float>()) CHECK(x == 0.0f);

  // An additive mask that wants a gradient: flash forward, fallback backward (same lse).
  const Tensor am = randn({70, 70}).to(kCUDA).requires_grad_(), amc = am.to(kCPU).detach().requires_grad_();
  const Tensor k = randn({1, 1, 70, 32}).to(kBFloat16), v = randn({1, 1, 70, 32}).to(kBFloat16);
  scaled_dot_product_attention(q, k.to(kCUDA), v.to(kCUDA), am).to(kFloat32).sum().backward();
  scaled_dot_product_attention(q.to(kCPU), k, v, amc).to(kFloat32).sum().backward();
  CHECK(rel_err(am.grad(), amc.grad()) < 2e-2);
}

#endif  // HG_WITH_CUDA
