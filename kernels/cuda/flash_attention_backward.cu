// Flash-attention backward on tensor cores (nvcuda::wmma), deterministic by construction: no
// atomics, every gradient element is summed by one warp in a fixed order, so two runs give
// bit-identical gradients. Three launches:
//   1. D_i = dO_i . O_i, one warp per query row;
//   2. per (64-key tile, b, h): over the query tiles that see it, recompute S^T = K Q^T and
//      dP^T = V dO^T, P = exp(S - lse), dS = P (dP - D), and accumulate dV += P^T dO and
//      dK += dS^T Q in register fragments (each warp owns 16 keys);
//   3. per (64-query tile, b, h): over the key tiles it sees, recompute S, dP, dS and accumulate
//      dQ += dS K (each warp owns 16 query rows).
// P and dS are rounded to the input dtype for their products, accumulation is in float, and dK, dQ
// are multiplied by the scale at the end. The pair work is done twice (the price of no atomics).
// The kernels are in flash_attention_backward.cuh. Not yet run on a GPU (docs/TRANSFORMER.md):
// tests/cpu/flash_reference.h models it, tests/flash_emulation runs it on the CPU.
#include <climits>

#include "framework/ops/creation.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_backward.cuh"
#include "kernels/cuda/flash_attention_host.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {
namespace {

using flash::kCols;
using flash::kRows;
using flash::kThreads;

template <class T, int D>
void launch_backward(const flash::Params& p, const AttentionArgs& a, const Tensor& gq, const Tensor& gk,
                     const Tensor& gv, const Tensor& go, const Tensor& o, const Tensor& lse, int dev) {
  cudaStream_t stream = current_stream(dev);
  const flash::Operand q = flash_operand(a.q), k = flash_operand(a.k), v = flash_operand(a.v), gop = flash_operand(go),
                       op = flash_operand(o);
  const int64_t rows = p.B * p.H * p.L;
  const Tensor dd = empty({rows}, TensorOptions(kFloat32).device(o.device()));
  float* ddp = static_cast<float*>(dd.raw_data());
  const float* lp = static_cast<const float*>(lse.raw_data());
  flash::flash_backward_dot_kernel<T>
      <<<static_cast<unsigned>((rows + flash::kDotRows - 1) / flash::kDotRows), 32 * flash::kDotRows, 0, stream>>>(
          p, gop, op, ddp);
  HG_CUDA_CHECK_LAUNCH();
  constexpr size_t smem = flash::backward_smem_bytes<D>();
  allow_smem(flash::flash_backward_kv_kernel<T, D>, smem);
  allow_smem(flash::flash_backward_q_kernel<T, D>, smem);
  const unsigned bh = static_cast<unsigned>(p.B * p.H);
  flash::flash_backward_kv_kernel<T, D>
      <<<dim3(static_cast<unsigned>((p.S + kCols - 1) / kCols), bh), kThreads, smem, stream>>>(
          p, q, k, v, gop, flash_operand(gk), flash_operand(gv), lp, ddp, gk.raw_data(), gv.raw_data());
  HG_CUDA_CHECK_LAUNCH();
  flash::flash_backward_q_kernel<T, D>
      <<<dim3(static_cast<unsigned>((p.L + kRows - 1) / kRows), bh), kThreads, smem, stream>>>(
          p, q, k, v, gop, flash_operand(gq), lp, ddp, gq.raw_data());
  HG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_attention_backward(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& go, const Tensor& o,
                              const Tensor& lse, const AttentionArgs& a) {
  const flash::Params p = flash_params(a);
  const int dev = a.q.device().index;
  DeviceGuard guard(dev);
  HG_CHECK(p.B * p.H * p.L / flash::kDotRows < INT32_MAX, "scaled_dot_product_attention", "{} query rows are too many",
           p.B * p.H * p.L);
  dispatch_flash(a, [&]<class T, int D>(TypeTag<T>, std::integral_constant<int, D>) {
    launch_backward<T, D>(p, a, gq, gk, gv, go, o, lse, dev);
  });
}

}  // namespace hg::cuda
