// CUDA sort/topk and multinomial by ranking: each element's place in its row is the number of
// elements that sort before it (ties broken by position, so the order is stable and equals the
// CPU's), one thread per element. That is O(n^2) work per row but needs no shared memory or
// temporary buffers and has no row-length limit; it suits the rows of a language model's
// vocabulary. A segmented radix sort (CUB) is the upgrade for long rows.
#include <cmath>

#include "framework/dispatch.h"
#include "framework/ops/categorical_kernels.h"
#include "framework/ops/sorting_kernels.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

// NaN is larger than every number.
template <class K>
__device__ __forceinline__ bool key_less(K a, K b) {
  return a < b || (b != b && a == a);
}

template <class T>
__global__ void sort_rank_kernel(T* __restrict__ values, int64_t* __restrict__ indices, const T* __restrict__ in,
                                 int64_t rows, int64_t n, int64_t k, bool descending) {
  HG_KERNEL_LOOP(t, rows * n) {
    const int64_t r = t / n, i = t % n;
    const T* row = in + r * n;
    const auto key = to_acc(row[i]);
    int64_t rank = 0;
    for (int64_t j = 0; j < n; ++j) {
      const auto other = to_acc(row[j]);
      const bool before = descending ? key_less(key, other) : key_less(other, key);
      const bool after = descending ? key_less(other, key) : key_less(key, other);
      rank += before || (!after && j < i);
    }
    if (rank < k) {
      values[r * k + rank] = row[i];
      indices[r * k + rank] = i;
    }
  }
}

void sort_cuda(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending) {
  const int64_t rows = in.shape()[0], n = in.shape()[1], k = values.shape()[1];
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    sort_rank_kernel<T><<<grid_for(rows * n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(values.raw_data()), static_cast<int64_t*>(indices.raw_data()),
        static_cast<const T*>(in.raw_data()), rows, n, k, descending);
    HG_CUDA_CHECK_LAUNCH();
  });
}

// With replacement: one thread per (row, sample), the CPU kernel's float64 running sums.
template <class T>
__global__ void multinomial_replacement_kernel(int64_t* __restrict__ out, const T* __restrict__ p,
                                               const double* __restrict__ u, int64_t rows, int64_t n, int64_t s) {
  HG_KERNEL_LOOP(t, rows * s) {
    const int64_t r = t / s;
    const T* row = p + r * n;
    double total = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double w = static_cast<double>(to_acc(row[i]));
      total += w;
      if (w > 0) last = i;
    }
    const double target = u[t] * total;
    double acc = 0;
    int64_t pick = last;
    for (int64_t i = 0; i < n; ++i) {
      const double w = static_cast<double>(to_acc(row[i]));
      acc += w;
      if (w > 0 && target < acc) {
        pick = i;
        break;
      }
    }
    out[t] = pick;
  }
}

// Without replacement: one thread per (row, class) ranks the class's key log(1 - u) / p.
template <class T>
__device__ __forceinline__ double sample_key(const T* row, const double* u, int64_t i) {
  const double w = static_cast<double>(to_acc(row[i]));
  return w > 0 ? ::log(1.0 - u[i]) / w : -INFINITY;
}

template <class T>
__global__ void multinomial_keys_kernel(int64_t* __restrict__ out, const T* __restrict__ p,
                                        const double* __restrict__ u, int64_t rows, int64_t n, int64_t s) {
  HG_KERNEL_LOOP(t, rows * n) {
    const int64_t r = t / n, i = t % n;
    const T* row = p + r * n;
    const double* ur = u + r * n;
    const double key = sample_key(row, ur, i);
    int64_t rank = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double other = sample_key(row, ur, j);
      rank += other > key || (other == key && j < i);
    }
    if (rank < s) out[r * s + rank] = i;
  }
}

void multinomial_cuda(const Tensor& out, const Tensor& probs, const Tensor& uniforms, bool replacement) {
  const int64_t rows = probs.shape()[0], n = probs.shape()[1], s = out.shape()[1];
  const int dev = probs.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(probs.dtype(), "multinomial", [&]<class T>(TypeTag<T>) {
    auto* o = static_cast<int64_t*>(out.raw_data());
    const auto* p = static_cast<const T*>(probs.raw_data());
    const auto* u = static_cast<const double*>(uniforms.raw_data());
    if (replacement) {
      multinomial_replacement_kernel<T>
          <<<grid_for(rows * s, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(o, p, u, rows, n, s);
    } else {
      multinomial_keys_kernel<T>
          <<<grid_for(rows * n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(o, p, u, rows, n, s);
    }
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(sort_stub, kCUDA, sort_cuda);
HG_REGISTER_KERNEL(multinomial_stub, kCUDA, multinomial_cuda);

}  // namespace hg::cuda
