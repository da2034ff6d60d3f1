// fp8 on CUDA: the float8 casts give the CPU's codes (every decode, the exact-rational table,
// every bfloat16 and float16 value), and an fp8 region (the emulation, run on the device) gives
// the CPU emulation's outputs, gradients and recipe state without host synchronisation.
#include <cstring>

#include "../cpu/fp8_reference_table.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_close;

namespace {
std::vector<uint8_t> fp8_codes(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel());
}
Tensor from_bytes(const std::vector<uint8_t>& bytes, const Shape& shape, Dtype d) {
  Tensor t = empty(shape, d);
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}
}  // namespace

TEST_CASE("cuda fp8: casts to and from float8 give the CPU's codes") {
  REQUIRE(cuda::is_available());
  std::vector<uint8_t> all(256);
  for (int c = 0; c < 256; ++c) all[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  for (Dtype d : {kFloat8E4M3, kFloat8E5M2}) {
    CAPTURE(dtype_name(d));
    const Tensor codes = from_bytes(all, {256}, d);
    for (Dtype wide : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      const Tensor cpu = codes.to(wide);
      const Tensor gpu = codes.to(kCUDA).to(wide).to(kCPU);
      CHECK(hg::test::bitwise_equal(gpu, cpu));
      // and back, on the device
      CHECK(fp8_codes(cpu.to(kCUDA).to(d)) == fp8_codes(cpu.to(d)));
    }
  }
  std::vector<float> inputs;
  for (const auto& row : hg_fp8_reference::kEncode) {
    float f;
    std::memcpy(&f, &row.f32, 4);
    inputs.push_back(f);
  }
  const Tensor x = tensor(inputs);
  const auto e4 = fp8_codes(x.to(kCUDA).to(kFloat8E4M3));
  const auto e5 = fp8_codes(x.to(kCUDA).to(kFloat8E5M2));
  for (size_t i = 0; i < inputs.size(); ++i) {
    CAPTURE(hg_fp8_reference::kEncode[i].f32);
    CHECK(e4[i] == hg_fp8_reference::kEncode[i].e4m3);
    CHECK(e5[i] == hg_fp8_reference::kEncode[i].e5m2);
  }
  for (Dtype wide : {kBFloat16, kFloat16}) {
    std::vector<uint8_t> raw(2 * 65536);
    for (uint32_t v = 0; v < 65536; ++v) std::memcpy(&raw[2 * v], &v, 2);
    const Tensor every = from_bytes(raw, {65536}, wide);
    for (Dtype d : {kFloat8E4M3, kFloat8E5M2}) CHECK(fp8_codes(every.to(kCUDA).to(d)) == fp8_codes(every.to(d)));
  }
  // fill stores what the CPU's does
  CHECK(fp8_codes(full({5}, 300.0, TensorOptions(kFloat8E4M3).device(kCUDA))) ==
        fp8_codes(full({5}, 300.0, kFloat8E4M3)));
}

TEST_CASE("cuda fp8: an fp8 region matches the CPU emulation, without host synchronisation") {
  REQUIRE(cuda::is_available());
  const amp::Fp8Recipe on_cpu({.amax_history_len = 4}), on_gpu({.amax_history_len = 4});
  manual_seed(8);
  const Tensor w0 = randn({32, 64}) * 0.2, b0 = randn({32}) * 0.1;
  Tensor w_c = w0.detach().requires_grad_(), b_c = b0.detach().requires_grad_();
  Tensor w_g = w0.to(kCUDA).requires_grad_(), b_g = b0.to(kCUDA).requires_grad_();
  for (int step = 0; step < 4; ++step) {
    CAPTURE(step);
    const Tensor x = randn({48, 64}) * (1.0 + step);
    Tensor y_c, y_g;
    {
      amp::Fp8Autocast fp8(kCPU, on_cpu);
      y_c = linear(x, w_c, b_c);
    }
    y_c.to(kFloat32).sum().backward();  // a gradient of ones: exact in E5M2 on both
    const int64_t syncs = cuda::host_sync_count();
    {
      amp::Fp8Autocast fp8(kCUDA, on_gpu);
      y_g = linear(x.to(kCUDA), w_g, b_g);
    }
    y_g.to(kFloat32).sum().backward();
    if (step > 0) CHECK(cuda::host_sync_count() == syncs);  // the first step made the state
    CHECK(y_g.dtype() == kBFloat16);
    check_close(y_g.to(kCPU), y_c, {1e-2, 1e-2});
    // Sums of the same fp8 values, in another order.
    check_close(w_g.grad().to(kCPU), w_c.grad(), {1e-4, 1e-5});
    check_close(b_g.grad().to(kCPU), b_c.grad(), {1e-4, 1e-5});
    CHECK(hg::test::bitwise_equal(on_gpu.amax_history().to(kCPU), on_cpu.amax_history()));
    check_close(on_gpu.scale().to(kCPU), on_cpu.scale(), {0, 1e-6});  // the same amaxes, divided on each device
    CHECK(on_gpu.scale().device().is_cuda());
  }
}
