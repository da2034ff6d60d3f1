// CUDA copy with dtype conversion (strided and broadcast sources), fill, and host<->device
// copies on the current stream.
#include "framework/dispatch.h"
#include "framework/ops/copy_kernels.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class To, class From>
struct ConvertFn {
  __device__ __forceinline__ To operator()(From v) const { return convert<To, From>(v); }
};

void copy_cuda(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.device() == src.device(), "copy", "expected tensors on one device, got {} and {}", dst.device(),
           src.device());
  dispatch_any_dtype(dst.dtype(), [&]<class To>(TypeTag<To>) {
    dispatch_any_dtype(src.dtype(), [&]<class From>(TypeTag<From>) {
      launch_unary<To, From>(dst, src, ConvertFn<To, From>{}, "copy");
    });
  });
}

template <class T>
__global__ void fill_flat_kernel(int64_t n, T* __restrict__ out, T value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / kVec<T>;
  VecOf<T, kVec<T>> v;
#pragma unroll
  for (int j = 0; j < kVec<T>; ++j) v.v[j] = value;
  for (int64_t i = tid; i < nvec; i += stride) reinterpret_cast<VecOf<T, kVec<T>>*>(out)[i] = v;
  for (int64_t i = nvec * kVec<T> + tid; i < n; i += stride) out[i] = value;
}

template <class T>
__global__ void fill_strided_kernel(Geometry<1> g, char* out, T value) {
  HG_KERNEL_LOOP(i, g.numel) {
    int64_t off[1];
    g.offsets(i, off);
    *reinterpret_cast<T*>(out + off[0]) = value;
  }
}

// The value as the CPU fill stores it (double -> float -> 16- or 8-bit float, as kernels/cpu/copy.cpp).
template <class T>
T host_value(double value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value != 0.0;
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16> || is_float8_v<T>) {
    return T(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

void fill_cuda(const Tensor& dst, double value) {
  const Geometry<1> g = make_geometry<1>(dst.shape(), {&dst}, "fill_");
  if (g.numel == 0) return;
  const int dev = dst.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  dispatch_any_dtype(dst.dtype(), [&]<class T>(TypeTag<T>) {
    const T v = host_value<T>(value);
    if (g.flat(0, sizeof(T)) && !g.scalar(0) && aligned(dst.raw_data(), sizeof(T) * kVec<T>)) {
      fill_flat_kernel<T><<<grid_for(g.numel, kThreads, kVec<T>, dev), kThreads, 0, stream>>>(
          g.numel, static_cast<T*>(dst.raw_data()), v);
    } else {
      fill_strided_kernel<T>
          <<<grid_for(g.numel, kThreads, 1, dev), kThreads, 0, stream>>>(g, static_cast<char*>(dst.raw_data()), v);
    }
  });
  HG_CUDA_CHECK_LAUNCH();
}

// Contiguous same-dtype copy between the CPU and a CUDA device. Host-to-device returns once the
// source has been staged (the host buffer may be reused at once); device-to-host waits for the
// copy and counts as a host synchronisation.
void cross_device_copy_cuda(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "to",
           "cross-device copy needs one dtype and size, got {} {} and {} {}", dst.dtype(), dst.shape(), src.dtype(),
           src.shape());
  HG_CHECK(dst.is_contiguous() && src.is_contiguous(), "to", "cross-device copy needs contiguous tensors");
  const size_t nbytes = static_cast<size_t>(dst.numel()) * element_size(dst.dtype());
  if (nbytes == 0) return;
  if (dst.device().is_cuda() && src.device().is_cuda()) {
    // Peer copy: queue on the destination's stream after the source's pending work.
    DeviceGuard guard(dst.device());
    host_sync(current_stream(src.device()));
    HG_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes, cudaMemcpyDefault, current_stream(dst.device())));
  } else if (dst.device().is_cuda()) {
    DeviceGuard guard(dst.device());
    HG_CUDA_CHECK(
        cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes, cudaMemcpyHostToDevice, current_stream(dst.device())));
  } else {
    HG_CHECK(src.device().is_cuda(), "to", "cross-device copy from {} to {}", src.device(), dst.device());
    DeviceGuard guard(src.device());
    copy_to_host(dst.raw_data(), src.raw_data(), nbytes, current_stream(src.device()));
  }
}

}  // namespace

HG_REGISTER_KERNEL(copy_stub, kCUDA, copy_cuda);
HG_REGISTER_KERNEL(fill_stub, kCUDA, fill_cuda);
HG_REGISTER_KERNEL(cross_device_copy_stub, kCUDA, cross_device_copy_cuda);

}  // namespace hg::cuda
