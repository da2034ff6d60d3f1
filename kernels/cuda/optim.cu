// Fused SGD and Adam/AdamW updates: one pass over each parameter that reads param, grad and
// the optimizer state once and writes them once. The skip flag (found_inf) is read on the
// device: when it is non-zero every thread returns before writing anything.
#include <cmath>
#include <type_traits>

#include "framework/dispatch.h"
#include "framework/ops/optim_update_kernels.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/optim_rules.cuh"

namespace hg::cuda {
namespace {

using optim::AdamHyper;
using optim::SgdHyper;

__device__ __forceinline__ bool skipped(const float* skip) { return optim_skipped(skip); }

// The new weights rounded into cast_out (a float16/bfloat16 C), the next autocast region's cast.
template <class T, class C>
__device__ __forceinline__ void write_cast(C* cast_out, int64_t i, acc_t<T> value) {
  if constexpr (!std::is_same_v<C, void>) cast_out[i] = optim_cast_value<T, C>(value);
}

// A skipped step leaves the parameter as it is; cast_out still gets its rounded values.
template <class C>
__global__ void cast_unchanged_kernel(int64_t n, const float* __restrict__ param, C* __restrict__ cast_out,
                                      const float* skip) {
  if (!skipped(skip)) return;
  HG_KERNEL_LOOP(i, n)
  cast_out[i] = from_acc<C>(param[i]);
}

// Calls f(C*) with cast_out's element type, or f(nullptr as void*) when it is undefined.
template <class T, class F>
void with_cast_type(const Tensor& cast_out, F&& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (cast_out.defined() && cast_out.dtype() == kFloat16) return f(static_cast<Half*>(cast_out.raw_data()));
    if (cast_out.defined()) return f(static_cast<BFloat16*>(cast_out.raw_data()));
  }
  HG_CHECK(!cast_out.defined(), "optimizer", "a warm cast needs a float32 parameter, got {}", dtype_of<T>);
  f(static_cast<void*>(nullptr));
}

template <class C>
void launch_cast_unchanged(const Tensor& param, C* cast_out, const float* skip, int dev, cudaStream_t stream) {
  if constexpr (!std::is_same_v<C, void>) {
    const int64_t n = param.numel();
    if (n == 0 || skip == nullptr) return;
    cast_unchanged_kernel<C>
        <<<grid_for(n, kThreads, 1, dev), kThreads, 0, stream>>>(n, param.data_ptr<float>(), cast_out, skip);
    HG_CUDA_CHECK_LAUNCH();
  }
}

template <class T, class C>
__global__ void sgd_kernel(int64_t n, T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ buf,
                           const int32_t* ready, const float* skip, C* __restrict__ cast_out, SgdHyper h) {
  if (skipped(skip)) return;
  const bool first = buf != nullptr && *ready == 0;
  HG_KERNEL_LOOP(i, n) {
    const acc_t<T> updated =
        sgd_value<T>(to_acc(param[i]), to_acc(grad[i]), buf != nullptr ? buf + i : nullptr, first, h);
    param[i] = from_acc<T>(updated);
    write_cast<T>(cast_out, i, updated);
  }
}

// Runs after sgd_kernel on the same stream, so no thread of the update reads a half-set flag.
__global__ void mark_ready_kernel(int32_t* ready, const float* skip) {
  if (!skipped(skip)) *ready = 1;
}

void sgd_update_cuda(const Tensor& param, const Tensor& grad, const Tensor& buf, const Tensor& ready,
                     const Tensor& skip, const Tensor& cast_out, const SgdHyper& h) {
  HG_CHECK(h.unscale_grad_by == 0.0f, "SGD", "the unscale folded into the update is CPU-only");
  const int dev = param.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const float* sk = skip.defined() ? skip.data_ptr<float>() : nullptr;
  const int64_t n = param.numel();
  dispatch_floating(param.dtype(), "SGD", [&]<class T>(TypeTag<T>) {
    with_cast_type<T>(cast_out, [&]<class C>(C* cast) {
      if (n > 0) {
        sgd_kernel<T, C><<<grid_for(n, kThreads, 1, dev), kThreads, 0, stream>>>(
            n, static_cast<T*>(param.raw_data()), static_cast<const T*>(grad.raw_data()),
            buf.defined() ? static_cast<T*>(buf.raw_data()) : nullptr,
            ready.defined() ? ready.data_ptr<int32_t>() : nullptr, sk, cast, h);
        HG_CUDA_CHECK_LAUNCH();
      }
      launch_cast_unchanged(param, cast, sk, dev, stream);
    });
  });
  if (buf.defined()) {
    mark_ready_kernel<<<1, 1, 0, stream>>>(ready.data_ptr<int32_t>(), sk);
    HG_CUDA_CHECK_LAUNCH();
  }
}

__global__ void advance_step_kernel(int64_t* step, const float* skip) {
  if (!skipped(skip)) *step += 1;
}

template <class T, class C>
__global__ void adam_kernel(int64_t n, T* __restrict__ param, const T* __restrict__ grad, T* __restrict__ m_,
                            T* __restrict__ v_, T* __restrict__ vmax_, const int64_t* step, const float* skip,
                            C* __restrict__ cast_out, AdamHyper h) {
  if (skipped(skip)) return;
  const AdamStepCoeffs<acc_t<T>> c(h, *step);
  HG_KERNEL_LOOP(i, n) {
    const acc_t<T> updated =
        adam_value<T>(to_acc(param[i]), to_acc(grad[i]), m_[i], v_[i], vmax_ != nullptr ? vmax_ + i : nullptr, c);
    param[i] = from_acc<T>(updated);
    write_cast<T>(cast_out, i, updated);
  }
}

void adam_update_cuda(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& vmax,
                      const Tensor& step, const Tensor& skip, const Tensor& cast_out, const AdamHyper& h) {
  HG_CHECK(h.unscale_grad_by == 0.0f, "Adam", "the unscale folded into the update is CPU-only");
  const int dev = param.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const float* sk = skip.defined() ? skip.data_ptr<float>() : nullptr;
  // The step advances first (skipped steps do not count), then the update reads it.
  advance_step_kernel<<<1, 1, 0, stream>>>(step.data_ptr<int64_t>(), sk);
  HG_CUDA_CHECK_LAUNCH();
  const int64_t n = param.numel();
  if (n == 0) return;
  dispatch_floating(param.dtype(), "Adam", [&]<class T>(TypeTag<T>) {
    with_cast_type<T>(cast_out, [&]<class C>(C* cast) {
      adam_kernel<T, C><<<grid_for(n, kThreads, 1, dev), kThreads, 0, stream>>>(
          n, static_cast<T*>(param.raw_data()), static_cast<const T*>(grad.raw_data()), static_cast<T*>(m.raw_data()),
          static_cast<T*>(v.raw_data()), vmax.defined() ? static_cast<T*>(vmax.raw_data()) : nullptr,
          step.data_ptr<int64_t>(), sk, cast, h);
      HG_CUDA_CHECK_LAUNCH();
      launch_cast_unchanged(param, cast, sk, dev, stream);
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(optim::sgd_update_stub, kCUDA, sgd_update_cuda);
HG_REGISTER_KERNEL(optim::adam_update_stub, kCUDA, adam_update_cuda);

}  // namespace hg::cuda
