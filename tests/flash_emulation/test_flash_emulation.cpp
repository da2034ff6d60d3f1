// The CUDA flash-attention kernels' own code (kernels/cuda/flash_attention_{forward,backward}.cuh),
// compiled for the CPU and run block by block under emulation.h, against the CPU model of their
// algorithm (tests/cpu/flash_reference.h): forward, lse and dq/dk/dv for every head dim, masks,
// causal, tails, L != S, E != Ev, strided inputs (16-byte and scalar loads), float16, several
// heads and a fully masked row. This checks the kernels' indexing, tiling, shared-memory layout
// and barriers without a GPU; what it cannot check is listed in emulation.h. Small sizes: an
// emulated block runs its 128 threads one after another.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "emulation.h"  // first: the kernels' CUDA primitives
#include "kernels/cuda/flash_attention_backward.cuh"
#include "kernels/cuda/flash_attention_forward.cuh"
#include "kernels/cuda/flash_attention_host.h"
#include "tests/cpu/flash_reference.h"

namespace hg::cuda::flash {
// The kernels' extern __shared__ arrays (the largest layout is 102.5 KiB).
constexpr size_t kEmuSmem = 128 * 1024;
alignas(128) unsigned char flash_fwd_smem[kEmuSmem];
alignas(128) unsigned char flash_kv_smem[kEmuSmem];
alignas(128) unsigned char flash_q_smem[kEmuSmem];
}  // namespace hg::cuda::flash

using namespace hg;
namespace flash_ref = hg::test::flash_ref;

namespace {

struct Result {
  Tensor out, lse, dq, dk, dv;
};

// Both directions through the emulated kernels, launched as flash_attention_{forward,backward}.cu
// launch them. Outputs start as NaN so an element no thread writes shows.
Result run_kernels(const AttentionArgs& a, const Tensor& go) {
  const int64_t B = a.q.size(0), H = a.q.size(1), L = a.q.size(2), S = a.k.size(2), E = a.q.size(3), Ev = a.v.size(3);
  const TensorOptions opt(a.q.dtype());
  // out in the op's layout: [B, L, H, Ev] memory.
  Result r{full({B, L, H, Ev}, NAN, opt).transpose(1, 2), full({B, H, L}, NAN), full({B, H, L, E}, NAN, opt),
           full({B, H, S, E}, NAN, opt), full({B, H, S, Ev}, NAN, opt)};
  const Tensor dd = full({B * H * L}, NAN);
  const cuda::flash::Params p = cuda::flash_params(a);
  const cuda::flash::Operand q = cuda::flash_operand(a.q), k = cuda::flash_operand(a.k), v = cuda::flash_operand(a.v),
                             o = cuda::flash_operand(r.out), g = cuda::flash_operand(go);
  float* lse = r.lse.data_ptr<float>();
  float* ddp = dd.data_ptr<float>();
  const unsigned bh = static_cast<unsigned>(B * H);
  const unsigned qtiles = static_cast<unsigned>((L + 63) / 64), ktiles = static_cast<unsigned>((S + 63) / 64);
  cuda::dispatch_flash(a, [&]<class T, int D>(TypeTag<T>, std::integral_constant<int, D>) {
    using namespace cuda::flash;
    emu::launch(dim3(qtiles, bh), kThreads, flash_fwd_smem, forward_smem_bytes<D>(),
                [&] { flash_forward_kernel<T, D>(p, q, k, v, o, r.out.raw_data(), lse); });
    const int64_t rows = B * H * L;
    emu::launch(dim3(static_cast<unsigned>((rows + kDotRows - 1) / kDotRows)), 32 * kDotRows, nullptr, 0,
                [&] { flash_backward_dot_kernel<T>(p, g, o, ddp); });
    emu::launch(dim3(ktiles, bh), kThreads, flash_kv_smem, backward_smem_bytes<D>(), [&] {
      flash_backward_kv_kernel<T, D>(p, q, k, v, g, cuda::flash_operand(r.dk), cuda::flash_operand(r.dv), lse, ddp,
                                     r.dk.raw_data(), r.dv.raw_data());
    });
    emu::launch(dim3(qtiles, bh), kThreads, flash_q_smem, backward_smem_bytes<D>(), [&] {
      flash_backward_q_kernel<T, D>(p, q, k, v, g, cuda::flash_operand(r.dq), lse, ddp, r.dq.raw_data());
    });
  });
  return r;
}

// max |a - b| / max |b|, NaN anywhere in a failing.
double rel_err(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) return INFINITY;
    if (std::isinf(y[i]) && x[i] == y[i]) continue;  // a fully masked row's lse
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return den > 0 ? num / den : num;
}

struct EmuCase {
  int64_t B, H, L, S, E, Ev;
  int mask;  // 0 none, 1 bool [L, S], 2 additive [B, 1, L, S], 3 bool with row 65 fully masked
  bool causal;
  bool strided;  // views of one [B, T, 3, H, E] tensor (L == S, E == Ev)
  Dtype dtype = kBFloat16;
};

template <class T>
void check_case(const EmuCase& c) {
  CAPTURE(c.L);
  CAPTURE(c.S);
  CAPTURE(c.E);
  CAPTURE(c.Ev);
  CAPTURE(c.mask);
  CAPTURE(c.causal);
  CAPTURE(c.strided);
  AttentionArgs a;
  if (c.strided) {
    const Tensor qkv = randn({c.B, c.L, 3, c.H, c.E}).to(c.dtype);
    a.q = transpose(select(qkv, 2, 0), 1, 2);
    a.k = transpose(select(qkv, 2, 1), 1, 2);
    a.v = transpose(select(qkv, 2, 2), 1, 2);
  } else {
    a.q = (randn({c.B, c.H, c.L, c.E}) * 1.5).to(c.dtype);
    a.k = (randn({c.B, c.H, c.S, c.E}) * 1.5).to(c.dtype);
    a.v = randn({c.B, c.H, c.S, c.Ev}).to(c.dtype);
  }
  Tensor mask;
  if (c.mask == 1 || c.mask == 3) {
    const auto u = rand({c.L, c.S}).to_vector<float>();
    std::vector<uint8_t> m(u.size());
    for (size_t x = 0; x < u.size(); ++x) {
      const int64_t i = static_cast<int64_t>(x) / c.S, j = static_cast<int64_t>(x) % c.S;
      m[x] = c.mask == 3 && i == 65 ? 0 : (u[x] > 0.3f || j == 0);
    }
    mask = tensor(m, {c.L, c.S}).to(kBool);
  }
  if (c.mask == 2) mask = randn({c.B, 1, c.L, c.S});
  if (mask.defined()) a.mask = expand(mask, {c.B, c.H, c.L, c.S});
  a.scale = 1.0 / std::sqrt(static_cast<double>(c.E));
  a.causal = c.causal;
  const Tensor go = randn({c.B, c.H, c.L, c.Ev}).to(c.dtype);

  const Result r = run_kernels(a, go);
  const flash_ref::Forward f = flash_ref::forward<T>(a.q, a.k, a.v, mask, c.causal, a.scale);
  const flash_ref::Grads g = flash_ref::backward<T>(a.q, a.k, a.v, mask, c.causal, a.scale, f.out, f.lse, go);
  // The same algorithm with the same summation order in every product: only the row sums of the
  // softmax are split in two halves, so within an occasional last-bit rounding of 16-bit values.
  const double tol = c.dtype == kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
  CHECK(rel_err(r.out, f.out) < tol);
  CHECK(rel_err(r.lse, f.lse) < 1e-6);
  CHECK(rel_err(r.dq, g.dq) < tol);
  CHECK(rel_err(r.dk, g.dk) < tol);
  CHECK(rel_err(r.dv, g.dv) < tol);
}

void check_case(const EmuCase& c) {
  if (c.dtype == kBFloat16)
    check_case<BFloat16>(c);
  else
    check_case<Half>(c);
}

}  // namespace

TEST_CASE("emulated flash kernels: every head dim, masks, causal, tail tiles") {
  manual_seed(51);
  for (int mask = 0; mask < 3; ++mask) check_case({1, 1, 130, 130, 64, 64, mask, false, false});
  for (int64_t E : {32, 64, 96, 128}) check_case({1, 1, 130, 130, E, E, 0, true, false});
  check_case({1, 1, 130, 130, 128, 128, 1, false, false});
  check_case({1, 1, 100, 100, 32, 32, 2, false, false});
}

TEST_CASE("emulated flash kernels: L != S, E != Ev, padded dims, strided, float16, heads, masked row") {
  manual_seed(52);
  check_case({1, 1, 70, 200, 40, 40, 0, false, false});
  check_case({1, 1, 200, 70, 40, 40, 0, true, false});
  check_case({1, 1, 90, 150, 72, 24, 1, false, false});
  check_case({2, 2, 130, 130, 64, 64, 0, true, true});   // 16-byte loads from views
  check_case({1, 2, 100, 100, 36, 36, 0, false, true});  // element loads (rows not in 8s)
  check_case({1, 1, 130, 130, 64, 64, 2, false, false, kFloat16});
  check_case({2, 3, 70, 90, 32, 32, 2, false, false});
  check_case({1, 1, 70, 70, 32, 32, 3, false, false});
  check_case({2, 3, 5, 7, 4, 6, 1, false, false});  // the cuda suite's small shapes: one partial tile
  check_case({2, 3, 5, 7, 4, 6, 0, true, false, kFloat16});
}
