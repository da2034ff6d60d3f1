// Flash-attention forward (FlashAttention-2's schedule) on tensor cores through nvcuda::wmma:
// one block per (64 query rows, b, h), four warps of 16 rows. Per 64-key tile in shared memory a
// warp computes S = Q K^T (16x16x16 products, float accumulators), then the online softmax in
// float with two lanes per row (running max m and sum l, the output rescaled by exp(m_old - m_new)),
// P rounded to 16 bits, and O += P V. O stays in accumulator fragments, rescaled element by element
// through a map of which row each element holds (read once from a loaded tile whose element (r, c)
// is r: wmma's fragment layout is unspecified); it is divided by l once and written once in the
// input dtype; lse = m + log(l) is saved for the backward. Causal blocks stop at the diagonal tile
// and start with the longest rows. The kernel is in flash_attention_forward.cuh. Not yet run on a
// GPU (docs/TRANSFORMER.md): tests/cpu/flash_reference.h models it, tests/flash_emulation runs it
// on the CPU, and tests/cuda/test_flash_attention.cpp checks it on a GPU.
#include <algorithm>
#include <climits>
#include <cstdlib>

#include "framework/dispatch.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_forward.cuh"
#include "kernels/cuda/flash_attention_host.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {
namespace {

using flash::kCols;
using flash::kRows;
using flash::kThreads;

template <class T, int D>
void launch_forward(const flash::Params& p, const flash::Operand& q, const flash::Operand& k, const flash::Operand& v,
                    const flash::Operand& o, void* out, float* lse, int dev) {
  constexpr size_t smem = flash::forward_smem_bytes<D>();
  allow_smem(flash::flash_forward_kernel<T, D>, smem);
  const dim3 grid(static_cast<unsigned>((p.L + kRows - 1) / kRows), static_cast<unsigned>(p.B * p.H));
  flash::flash_forward_kernel<T, D><<<grid, kThreads, smem, current_stream(dev)>>>(p, q, k, v, o, out, lse);
  HG_CUDA_CHECK_LAUNCH();
}

// The largest shared memory either direction needs at head dim D.
size_t flash_smem_needed(int64_t D) {
  switch (D) {
    case 32: return std::max(flash::forward_smem_bytes<32>(), flash::backward_smem_bytes<32>());
    case 64: return std::max(flash::forward_smem_bytes<64>(), flash::backward_smem_bytes<64>());
    case 96: return std::max(flash::forward_smem_bytes<96>(), flash::backward_smem_bytes<96>());
    default: return std::max(flash::forward_smem_bytes<128>(), flash::backward_smem_bytes<128>());
  }
}

bool flash_enabled_by_env() {
  static const bool on = [] {
    const char* e = std::getenv("HG_CUDA_FLASH_ATTENTION");
    return !(e && e[0] == '0');
  }();
  return on;
}

}  // namespace

bool flash_attention_supported(const AttentionArgs& a) {
  if (!flash_enabled_by_env() || a.dropout_p > 0.0) return false;
  if (a.q.dtype() != kFloat16 && a.q.dtype() != kBFloat16) return false;
  const int64_t D = flash_head_dim(a.q.size(3), a.v.size(3));
  if (D == 0 || a.q.numel() == 0 || a.k.numel() == 0) return false;  // empty inputs: the fallback's zeros
  const int64_t BH = a.q.size(0) * a.q.size(1);
  if (BH > 65535 || (a.q.size(2) + kRows - 1) / kRows > INT32_MAX) return false;  // grid limits
  const cudaDeviceProp& prop = device_properties(a.q.device().index);
  return prop.major >= 8 && prop.sharedMemPerBlockOptin >= flash_smem_needed(D);  // wmma bf16 needs sm_80
}

void flash_attention_forward(const Tensor& out, const Tensor& lse, const AttentionArgs& a) {
  const flash::Params p = flash_params(a);
  const int dev = a.q.device().index;
  DeviceGuard guard(dev);
  const flash::Operand q = flash_operand(a.q), k = flash_operand(a.k), v = flash_operand(a.v), o = flash_operand(out);
  float* l = static_cast<float*>(lse.raw_data());
  dispatch_flash(a, [&]<class T, int D>(TypeTag<T>, std::integral_constant<int, D>) {
    launch_forward<T, D>(p, q, k, v, o, out.raw_data(), l, dev);
  });
}

}  // namespace hg::cuda
