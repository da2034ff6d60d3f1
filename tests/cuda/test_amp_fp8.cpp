// fp8 on CUDA: the float8 casts give the CPU's codes (every decode, the exact-rational table,
// every bfloat16 and float16 value); the fused cast + transpose + amax kernel gives its CPU
// reference's codes and amax; the cuBLASLt fp8 GEMM (compute capability 8.9+) matches the
// emulation up to the order of accumulation; and an fp8 region gives the CPU emulation's outputs,
// gradients and recipe state without host synchronisation (below 8.9: falls back, counted).
// Written without a GPU to run on: none of these has run yet.
#include <cmath>
#include <cstring>

#include "../cpu/fp8_reference_table.h"
#include "helpers.h"

#ifdef HG_WITH_CUDA
#include "kernels/cuda/blas/lt_matmul.h"
#endif

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

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

TEST_CASE("cuda fp8: the fused cast + transpose + amax kernel gives its CPU reference's codes and amax") {
  REQUIRE(cuda::is_available());
  for (Dtype in : {kFloat32, kBFloat16, kFloat16}) {
    for (Dtype f8 : {kFloat8E4M3, kFloat8E5M2}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 53}, {1, 1}, {64, 48}, {3, 200}, {1000, 33}}) {
        CAPTURE(dtype_name(in));
        CAPTURE(dtype_name(f8));
        CAPTURE(rows);
        CAPTURE(cols);
        manual_seed(static_cast<uint64_t>(rows + cols));
        std::vector<float> v = (randn({rows, cols}) * 60.0).to_vector<float>();
        const float specials[] = {NAN, INFINITY, -1e9f, 464.0f, 1e-7f, -0.0f, 61440.0f};
        for (size_t i = 0; i < v.size(); i += 11) v[i] = specials[(i / 11) % 7];
        const Tensor x = tensor(v).reshape({rows, cols}).to(in);
        const Tensor scale = full({1}, 1.9);
        // The slot inside a larger tensor, already holding a value, as the recipe's history row.
        Tensor amax_c = tensor(std::vector<float>{5.0f, 3.0f, 5.0f});
        Tensor amax_g = amax_c.to(kCUDA);
        const amp::Fp8Operand c = amp::fp8_cast_transpose(x, scale, f8, amax_c.narrow(0, 1, 1), true, true);
        const int64_t syncs = cuda::host_sync_count();
        const amp::Fp8Operand g =
            amp::fp8_cast_transpose(x.to(kCUDA), scale.to(kCUDA), f8, amax_g.narrow(0, 1, 1), true, true);
        CHECK(cuda::host_sync_count() == syncs);
        CHECK(fp8_codes(g.data) == fp8_codes(c.data));
        CHECK(fp8_codes(g.data_t) == fp8_codes(c.data_t));
        CHECK(hg::test::bitwise_equal(amax_g.to(kCPU), amax_c));
        // Either layout alone.
        const amp::Fp8Operand t_only = amp::fp8_cast_transpose(x.to(kCUDA), scale.to(kCUDA), f8,
                                                               zeros({1}, TensorOptions().device(kCUDA)), false, true);
        CHECK(!t_only.data.defined());
        CHECK(fp8_codes(t_only.data_t) == fp8_codes(c.data_t));
      }
    }
  }
}

TEST_CASE("cuda fp8: the cuBLASLt fp8 GEMM matches the emulation up to the order of accumulation") {
  REQUIRE(cuda::is_available());
  const Tensor one = ones({1}, TensorOptions().device(kCUDA));
  if (!amp::fp8_gemm_available(kCUDA)) {
    MESSAGE("SKIPPED the device fp8 GEMM: this GPU's compute capability is below 8.9 (the refusal is checked)");
    const Tensor e4 = ones({16, 16}, TensorOptions().device(kCUDA)).to(kFloat8E4M3);
    check_error([&] { (void)amp::fp8_gemm(e4, e4, one, one, kBFloat16); }, {"[fp8_gemm]", "compute capability"});
    return;
  }
  manual_seed(42);
  const int64_t m = 64, n = 96, k = 256;
  const Tensor inv_a = full({1}, 0.05, TensorOptions().device(kCUDA)),
               inv_b = full({1}, 0.3, TensorOptions().device(kCUDA));
  for (auto [da, db] : {std::pair{kFloat8E4M3, kFloat8E4M3}, {kFloat8E5M2, kFloat8E4M3}, {kFloat8E4M3, kFloat8E5M2}}) {
    for (Dtype out : {kFloat32, kBFloat16, kFloat16}) {
      for (bool fast : {false, true}) {
        CAPTURE(dtype_name(da));
        CAPTURE(dtype_name(db));
        CAPTURE(dtype_name(out));
        CAPTURE(fast);
        const Tensor a8 = (randn({m, k}) * 30.0).to(da).to(kCUDA), b8 = (randn({n, k}) * 30.0).to(db).to(kCUDA);
        const Tensor want = amp::fp8_gemm_emulated(a8, b8, inv_a, inv_b, kFloat32);
        const Tensor got = amp::fp8_gemm(a8, b8, inv_a, inv_b, out, fast);
        CHECK(got.dtype() == out);
        CHECK(got.device().is_cuda());
        // float32 sums of 256 exact products in another order (fast accumulation: promoted less
        // often), then rounded once to `out`.
        const double round = out == kFloat32 ? 0.0 : (out == kBFloat16 ? 8e-3 : 1e-3);
        check_close(got.to(kFloat32).to(kCPU), want.to(kCPU), {fast ? 1e-2 : 1e-3, (fast ? 1e-4 : 1e-5) + round});
      }
    }
  }
  const Tensor e5 = ones({16, 16}, TensorOptions().device(kCUDA)).to(kFloat8E5M2);
  check_error([&] { (void)amp::fp8_gemm(e5, e5, one, one, kBFloat16); }, {"[fp8_gemm]", "E5M2"});
#ifdef HG_WITH_CUDA
  // The wrapper's fp8 output: D = d_scale * (A B descaled), amax_d = max |A B| descaled, and its
  // refusal of a layout that is not TN.
  const Tensor a8 = (randn({m, k}) * 30.0).to(kFloat8E4M3).to(kCUDA),
               b8 = (randn({n, k}) * 30.0).to(kFloat8E4M3).to(kCUDA);
  const Tensor d_scale = full({1}, 0.25, TensorOptions().device(kCUDA));
  Tensor amax_d = zeros({1}, TensorOptions().device(kCUDA));
  Tensor d8 = empty({m, n}, TensorOptions(kFloat8E4M3).device(kCUDA));
  cuda::blas::GemmProblem p;
  p.dtype = kFloat8E4M3;
  p.a_dtype = kFloat8E4M3;
  p.b_dtype = kFloat8E4M3;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = {a8.raw_data(), k, 1, 0};
  p.b = {b8.raw_data(), 1, k, 0};
  p.d = d8.raw_data();
  p.ldd = n;
  p.a_scale = static_cast<const float*>(inv_a.raw_data());
  p.b_scale = static_cast<const float*>(inv_b.raw_data());
  p.d_scale = static_cast<const float*>(d_scale.raw_data());
  p.amax_d = static_cast<float*>(amax_d.raw_data());
  cuda::blas::lt_matmul(p);
  const Tensor ref = amp::fp8_gemm_emulated(a8, b8, inv_a, inv_b, kFloat32).to(kCPU);
  const float ref_amax = max(abs(ref)).item<float>();
  CHECK(std::fabs(amax_d.item<float>() - ref_amax) <= 1e-4f * ref_amax);
  // One E4M3 step is 1/8 relative: an accumulation-order difference may move a code by one.
  check_close(d8.to(kFloat32).to(kCPU), clamp(ref * 0.25, -448.0, 448.0), {1e-2, 0.13});
  cuda::blas::GemmProblem nn = p;
  nn.b = {b8.raw_data(), n, 1, 0};  // B [k, n] row-major: not K-major
  nn.k = n;
  nn.n = k;
  check_error([&] { cuda::blas::lt_matmul(nn); }, {"[fp8_gemm]", "K-major"});
#endif
}

TEST_CASE("cuda fp8: an fp8 region matches the CPU emulation, without host synchronisation") {
  REQUIRE(cuda::is_available());
  const amp::Fp8Recipe on_cpu({.amax_history_len = 4}), on_gpu({.amax_history_len = 4});
  if (!amp::fp8_gemm_available(kCUDA)) {
    MESSAGE("SKIPPED the fp8 region on the device: compute capability below 8.9 (its fallback is checked)");
    const Tensor x = randn({32, 64}).to(kCUDA), w = randn({16, 64}).to(kCUDA);
    Tensor y;
    {
      amp::Fp8Autocast fp8(kCUDA, on_gpu);
      y = linear(x, w);
    }
    CHECK(on_gpu.fallbacks() == 1);
    CHECK(on_gpu.gemms() == 0);
    CHECK(y.dtype() == kBFloat16);
    return;
  }
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
