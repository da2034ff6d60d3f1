// CUDA scaled_dot_product_attention against the CPU kernel: forward and the gradients of q, k, v
// (and of an additive mask), every float dtype, masks, causal, dropout (same seed: same draws).
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::Tolerance;

namespace {
Tolerance attn_tolerance(Dtype d) {
  switch (d) {
    case kFloat64: return {1e-10, 1e-10};
    case kFloat32: return {2e-5, 2e-4};
    case kFloat16: return {4e-3, 4e-3};
    case kBFloat16: return {3e-2, 3e-2};
    default: return {0, 0};
  }
}

// Output and input gradients (of sum(out * w)) on `dev`; the dropout seed is reset first.
std::vector<Tensor> run(Device dev, const std::vector<Tensor>& in, const Tensor& mask, bool causal, double p) {
  std::vector<Tensor> xs;
  for (const Tensor& t : in) xs.push_back(t.detach().to(dev).requires_grad_());
  Tensor m = mask.defined() ? mask.detach().to(dev) : Tensor();
  if (m.defined() && m.is_floating_point()) m.requires_grad_();
  manual_seed(1234);
  const Tensor y = scaled_dot_product_attention(xs[0], xs[1], xs[2], m, p, causal);
  const Tensor w = randn(y.shape(), TensorOptions(kFloat64)).to(dev).to(y.dtype());
  (y * w).to(kFloat32).sum().backward();
  std::vector<Tensor> out{y.detach().to(kCPU)};
  for (const Tensor& x : xs) out.push_back(x.grad().to(kCPU));
  if (m.defined() && m.requires_grad()) out.push_back(m.grad().to(kCPU));
  return out;
}
}  // namespace

TEST_CASE("cuda scaled_dot_product_attention (+backward) matches the CPU") {
  struct Case {
    int64_t B, H, L, S, E, Ev;
    int mask;  // 0 none, 1 bool, 2 additive [L, S]
    bool causal;
    double p;
  };
  const Case cases[] = {{2, 3, 5, 7, 4, 6, 0, false, 0.0},      {2, 3, 5, 7, 4, 6, 1, false, 0.0},
                        {2, 3, 5, 7, 4, 6, 2, false, 0.0},      {2, 4, 40, 40, 16, 16, 0, true, 0.0},
                        {1, 2, 130, 130, 64, 64, 0, true, 0.0}, {2, 2, 33, 33, 8, 8, 0, false, 0.3}};
  for (const Case& c : cases) {
    for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      CAPTURE(d);
      CAPTURE(c.L);
      CAPTURE(c.mask);
      manual_seed(7);
      const std::vector<Tensor> in{randn({c.B, c.H, c.L, c.E}).to(d), randn({c.B, c.H, c.S, c.E}).to(d),
                                   randn({c.B, c.H, c.S, c.Ev}).to(d)};
      Tensor mask;
      if (c.mask == 1) mask = gt(rand({c.L, c.S}), scalar_tensor(0.2));
      if (c.mask == 2) mask = randn({c.L, c.S}).to(d);
      manual_seed(99);
      const auto cpu = run(kCPU, in, mask, c.causal, c.p);
      manual_seed(99);
      const auto gpu = run(kCUDA, in, mask, c.causal, c.p);
      REQUIRE(cpu.size() == gpu.size());
      for (size_t i = 0; i < cpu.size(); ++i) {
        CAPTURE(i);
        check_close(gpu[i].to(kFloat64), cpu[i].to(kFloat64), attn_tolerance(d));
      }
    }
  }
}
