// cross_entropy_fused_ on CUDA, llm.c's fused classifier: a block per row reads the row once
// with 16-byte loads, keeping an online maximum and sum of exponentials per thread, combines
// them across the block, then writes the gradient over the row in its dtype (the second read
// mostly hits L2). The kept-target count, which a mean's 1 / count needs inside the pass, comes
// from a one-block kernel launched first; nothing waits on the host.
#include <cmath>

#include "framework/dispatch.h"
#include "framework/ops/loss_fused_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kFusedRowThreads = 256;
constexpr int kCountThreads = 1024;

__global__ void count_kept_kernel(unsigned long long* count, const int64_t* target, int64_t n, int64_t ignore) {
  __shared__ unsigned long long scratch[32];
  unsigned long long kept = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) kept += target[i] != ignore;
  kept = block_sum(kept, scratch);
  if (threadIdx.x == 0) *count = kept;
}

// A running (maximum, sum of exp(x - maximum)) pair. Merging at -inf keeps the sum (no
// exp(-inf - -inf) = NaN); NaN maxima propagate as cross_entropy's kernels do.
template <class C>
struct OnlineSum {
  C m = -INFINITY, s = 0;
  __device__ __forceinline__ void merge(C om, C os) {
    const C nm = nan_max(m, om);
    if (nm == -INFINITY) return;
    s = (m == -INFINITY ? C(0) : s * exp(m - nm)) + (om == -INFINITY ? C(0) : os * exp(om - nm));
    m = nm;
  }
};

template <class C>
__device__ OnlineSum<C> block_online(OnlineSum<C> v, C* scratch_m, C* scratch_s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v.merge(__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch_m[warp] = v.m, scratch_s[warp] = v.s;
  __syncthreads();
  OnlineSum<C> all;
  for (int w = 0; w < warps; ++w) all.merge(scratch_m[w], scratch_s[w]);
  __syncthreads();
  return all;
}

// V elements per access: 16 bytes when the rows are aligned for it, else 1.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// One block per row of ld values, the first c of them classes (the rest padding: out of the
// softmax, gradient 0).
template <class T, class C, int V>
__global__ void fused_classifier_kernel(C* loss, T* x, const int64_t* target, const unsigned long long* kept, int64_t c,
                                        int64_t ld, int64_t ignore, C eps, bool mean, bool write_grad,
                                        DeviceErrorRecord* errors, int op) {
  __shared__ C scratch_m[32], scratch_s[32];
  const int64_t r = blockIdx.x;
  T* row = x + r * ld;
  auto* packs = reinterpret_cast<Pack<T, V>*>(row);
  const int64_t np = ld / V;
  const int64_t t = target[r];
  if (t == ignore || t < 0 || t >= c) {
    if (threadIdx.x == 0) {
      if (t != ignore) report_device_error(errors, DeviceErrorKind::TargetOutOfRange, op, r, t, c);
      loss[r] = C(0);
    }
    if (write_grad) {
      Pack<T, V> zero;
#pragma unroll
      for (int j = 0; j < V; ++j) zero.v[j] = from_acc<T>(acc_t<T>(0));
      for (int64_t p = threadIdx.x; p < np; p += blockDim.x) packs[p] = zero;
    }
    return;
  }
  OnlineSum<C> acc;
  C total = 0;
  for (int64_t p = threadIdx.x; p < np; p += blockDim.x) {
    const Pack<T, V> in = packs[p];
    C v[V];
    C vm = -INFINITY;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const bool cls = p * V + j < c;
      v[j] = cls ? static_cast<C>(to_acc(in.v[j])) : C(-INFINITY);
      vm = nan_max(vm, v[j]);
      if (cls) total += v[j];
    }
    C vs = 0;
    if (vm != -INFINITY) {
#pragma unroll
      for (int j = 0; j < V; ++j) vs += exp(v[j] - vm);
    }
    acc.merge(vm, vs);
  }
  const OnlineSum<C> row_sum = block_online(acc, scratch_m, scratch_s);
  if (eps != C(0)) total = block_sum(total, scratch_m);
  const C w = mean ? C(1) / static_cast<C>(*kept) : C(1);
  const C lse = row_sum.m + ::log(row_sum.s);
  const C picked = static_cast<C>(to_acc(row[t]));  // read before any thread overwrites the row
  __syncthreads();
  if (threadIdx.x == 0) {
    C l = lse - picked;
    if (eps != C(0)) l = (C(1) - eps) * l + eps * (lse - total / static_cast<C>(c));
    loss[r] = l;
  }
  if (!write_grad) return;
  const C keep = C(1) - eps, scale = w / row_sum.s, shift = eps / static_cast<C>(c) * w;
  for (int64_t p = threadIdx.x; p < np; p += blockDim.x) {
    Pack<T, V> io = packs[p];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t i = p * V + j;
      C g = i < c ? exp(static_cast<C>(to_acc(io.v[j])) - row_sum.m) * scale - shift : C(0);
      if (i == t) g -= keep * w;
      io.v[j] = from_acc<T>(static_cast<acc_t<T>>(g));
    }
    packs[p] = io;
  }
}

template <class T, class C, int V>
void launch_rows(const Tensor& losses, const Tensor& count, const Tensor& logits, const Tensor& target, int64_t c,
                 int64_t ignore_index, double label_smoothing, bool mean, bool write_grad, int op) {
  const int64_t n = logits.shape()[0], ld = logits.shape()[1];
  const int dev = logits.device().index;
  fused_classifier_kernel<T, C, V><<<static_cast<unsigned>(n), kFusedRowThreads, 0, current_stream(dev)>>>(
      static_cast<C*>(losses.raw_data()), static_cast<T*>(logits.raw_data()),
      static_cast<const int64_t*>(target.raw_data()), static_cast<const unsigned long long*>(count.raw_data()), c, ld,
      ignore_index, static_cast<C>(label_smoothing), mean, write_grad, device_error_record(), op);
  HG_CUDA_CHECK_LAUNCH();
}

void cross_entropy_fused_cuda(const Tensor& losses, const Tensor& count, const Tensor& logits, const Tensor& target,
                              int64_t classes, int64_t ignore_index, double label_smoothing, bool mean,
                              bool write_grad) {
  const int64_t n = logits.shape()[0], c = logits.shape()[1];  // c: the row length, padding included
  if (n == 0) return;
  HG_CHECK(n <= INT32_MAX, "cross_entropy_fused_", "{} rows are too many for one launch", n);
  const int dev = logits.device().index;
  DeviceGuard guard(dev);
  static const int op = device_error_op("cross_entropy");  // the name the CPU kernel's error carries
  count_kept_kernel<<<1, kCountThreads, 0, current_stream(dev)>>>(static_cast<unsigned long long*>(count.raw_data()),
                                                                  static_cast<const int64_t*>(target.raw_data()), n,
                                                                  ignore_index);
  HG_CUDA_CHECK_LAUNCH();
  dispatch_floating(logits.dtype(), "cross_entropy_fused_", [&]<class T>(TypeTag<T>) {
    constexpr int kV = static_cast<int>(16 / sizeof(T));
    const auto address = reinterpret_cast<uintptr_t>(logits.raw_data());
    const bool packed = address % 16 == 0 && (c * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    if (logits.dtype() == kFloat64) {
      if constexpr (std::is_same_v<T, double>) {
        if (packed)
          launch_rows<T, double, kV>(losses, count, logits, target, classes, ignore_index, label_smoothing, mean,
                                     write_grad, op);
        else
          launch_rows<T, double, 1>(losses, count, logits, target, classes, ignore_index, label_smoothing, mean,
                                    write_grad, op);
      }
    } else if constexpr (!std::is_same_v<T, double>) {
      if (packed)
        launch_rows<T, float, kV>(losses, count, logits, target, classes, ignore_index, label_smoothing, mean,
                                  write_grad, op);
      else
        launch_rows<T, float, 1>(losses, count, logits, target, classes, ignore_index, label_smoothing, mean,
                                 write_grad, op);
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(cross_entropy_fused_stub, kCUDA, cross_entropy_fused_cuda);

}  // namespace hg::cuda
