// CUDA kernels for GradScaler: a multi-tensor unscale that flags inf/NaN into found_inf while it
// multiplies by 1/scale, and the scale update as a one-thread kernel. Neither reads anything
// back to the host, so an AMP step never waits for the device here.
#include <cmath>

#include "framework/dispatch.h"
#include "framework/ops/grad_scaling_kernels.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

// Up to kMaxTensors same-dtype tensors per launch; each block walks a fixed-size chunk of one.
constexpr int kMaxTensors = 32;
constexpr int64_t kChunk = 16384;

template <class T>
struct TensorChunks {
  int count = 0;
  T* data[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t first_block[kMaxTensors + 1];  // prefix sum of blocks per tensor
};

template <class T>
__global__ void unscale_kernel(TensorChunks<T> list, float* __restrict__ found_inf, const float* __restrict__ scale) {
  int t = 0;
  while (t + 1 < list.count && list.first_block[t + 1] <= static_cast<int64_t>(blockIdx.x)) ++t;
  const int64_t begin = (static_cast<int64_t>(blockIdx.x) - list.first_block[t]) * kChunk;
  const int64_t end = min(begin + kChunk, list.numel[t]);
  // The reciprocal in double, rounded once to float (as PyTorch's inv_scale).
  const auto inv = static_cast<float>(1.0 / static_cast<double>(*scale));
  T* data = list.data[t];
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const auto v = to_acc(data[i]);
    bad |= !isfinite(v);
    data[i] = from_acc<T>(static_cast<acc_t<T>>(v * static_cast<acc_t<T>>(inv)));
  }
  // Every writer stores the same value, so the race is benign and needs no atomic.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

template <class T>
void unscale_many(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& scale) {
  const int dev = found_inf.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  size_t next = 0;
  while (next < grads.size()) {
    TensorChunks<T> list;
    int64_t blocks = 0;
    list.first_block[0] = 0;
    for (; next < grads.size() && list.count < kMaxTensors; ++next) {
      const Tensor& g = grads[next];
      if (g.numel() == 0) continue;
      list.data[list.count] = static_cast<T*>(g.raw_data());
      list.numel[list.count] = g.numel();
      blocks += (g.numel() + kChunk - 1) / kChunk;
      list.first_block[++list.count] = blocks;
    }
    if (list.count == 0) break;
    HG_CHECK(blocks <= INT32_MAX, "amp_unscale_", "too many gradient elements for one launch");
    unscale_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        list, found_inf.data_ptr<float>(), static_cast<const float*>(scale.raw_data()));
    HG_CUDA_CHECK_LAUNCH();
  }
}

void unscale_grad_cuda(const TensorList& grads, const Tensor& found_inf, const Tensor& scale) {
  if (grads.empty()) return;
  for (const Tensor& g : grads)
    HG_CHECK(g.is_contiguous() && g.dtype() == grads[0].dtype() && g.device() == found_inf.device() &&
                 g.device() == scale.device(),
             "amp_unscale_", "expected contiguous gradients of one dtype with found_inf and scale on their device ({})",
             found_inf.device());
  dispatch_floating(grads[0].dtype(), "amp_unscale_",
                    [&]<class T>(TypeTag<T>) { unscale_many<T>(grads, found_inf, scale); });
}

__global__ void update_scale_kernel(float* scale, int32_t* tracker, const float* found_inf, double growth_factor,
                                    double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * backoff_factor);
    *tracker = 0;
    return;
  }
  const int64_t clean = static_cast<int64_t>(*tracker) + 1;
  if (clean >= growth_interval) {
    const auto grown = static_cast<float>(*scale * growth_factor);
    if (isfinite(grown)) *scale = grown;  // growth is capped: the scale never becomes inf
    *tracker = 0;
  } else {
    *tracker = static_cast<int32_t>(clean);
  }
}

void update_scale_cuda(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                       double backoff_factor, int64_t growth_interval) {
  const int dev = scale.device().index;
  DeviceGuard guard(dev);
  update_scale_kernel<<<1, 1, 0, current_stream(dev)>>>(scale.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                                                        found_inf.data_ptr<float>(), growth_factor, backoff_factor,
                                                        growth_interval);
  HG_CUDA_CHECK_LAUNCH();
}

}  // namespace

HG_REGISTER_KERNEL(unscale_grad_stub, kCUDA, unscale_grad_cuda);
HG_REGISTER_KERNEL(update_scale_stub, kCUDA, update_scale_cuda);

}  // namespace hg::cuda
