// add_layer_norm on CUDA in one kernel, a block per row: the sum written once and its statistics
// taken from the float32 values just written (each thread rereads only its own elements), then
// the normalised row rounded once into the output's dtype: where the unfused add, layer_norm and
// the next linear's cast read and write the row five times, this reads two rows and writes two.
#include <cmath>

#include "framework/dispatch.h"
#include "framework/ops/norm_fused_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kAddNormThreads = 256;

template <class X, class Y>
__global__ void add_layer_norm_kernel(float* sum, Y* out, float* mean, float* rstd, const X* x, const float* res,
                                      const float* w, const float* b, int64_t cols, double eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * cols;
  float s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = static_cast<float>(to_acc(x[base + j])) + res[base + j];
    sum[base + j] = v;
    s += v;
  }
  const float m = block_sum(s, scratch) / static_cast<float>(cols);
  float ss = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float d = sum[base + j] - m;
    ss += d * d;
  }
  const float inv = static_cast<float>(1.0 / sqrt(static_cast<double>(block_sum(ss, scratch) / cols) + eps));
  if (threadIdx.x == 0) mean[row] = m, rstd[row] = inv;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float y = (sum[base + j] - m) * inv * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
    out[base + j] = from_acc<Y>(static_cast<acc_t<Y>>(y));
  }
}

// Calls f(TypeTag<T>) for float32, bfloat16 and float16; throws for other dtypes.
template <class F>
void dispatch_add_norm(Dtype d, const char* what, F&& f) {
  switch (d) {
    case kFloat32: f(TypeTag<float>{}); break;
    case kBFloat16: f(TypeTag<BFloat16>{}); break;
    case kFloat16: f(TypeTag<Half>{}); break;
    default: fail("add_layer_norm", "the fused kernel takes a float32, bfloat16 or float16 {}, got {}", what, d);
  }
}

void add_layer_norm_cuda(const Tensor& sum, const Tensor& normalized, const Tensor& mean, const Tensor& rstd,
                         const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                         double eps) {
  const int64_t rows = mean.numel(), cols = rows ? sum.numel() / rows : 0;
  if (rows == 0 || cols == 0) return;
  HG_CHECK(rows <= INT32_MAX, "add_layer_norm", "{} rows are too many for one launch", rows);
  const int dev = sum.device().index;
  DeviceGuard guard(dev);
  dispatch_add_norm(x.dtype(), "input", [&]<class X>(TypeTag<X>) {
    dispatch_add_norm(normalized.dtype(), "output", [&]<class Y>(TypeTag<Y>) {
      add_layer_norm_kernel<X, Y><<<static_cast<unsigned>(rows), kAddNormThreads, 0, current_stream(dev)>>>(
          static_cast<float*>(sum.raw_data()), static_cast<Y*>(normalized.raw_data()),
          static_cast<float*>(mean.raw_data()), static_cast<float*>(rstd.raw_data()),
          static_cast<const X*>(x.raw_data()), static_cast<const float*>(residual.raw_data()),
          weight.defined() ? static_cast<const float*>(weight.raw_data()) : nullptr,
          bias.defined() ? static_cast<const float*>(bias.raw_data()) : nullptr, cols, eps);
      HG_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(add_layer_norm_stub, kCUDA, add_layer_norm_cuda);

}  // namespace hg::cuda
