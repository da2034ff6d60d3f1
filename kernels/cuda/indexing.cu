// CUDA kernels for gather, scatter_add, index_select, index_add, where and clamp. Indices are
// checked by the kernels themselves, which skip a bad one (gather/index_select write 0 there) and
// report it through the device error record: the hg::Error comes at the next host
// synchronisation, not from the op (the CPU kernels throw before writing anything).
#include <limits>
#include <optional>

#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing_kernels.h"
#include "framework/ops/minmax_kernels.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

// Where a kernel reports an index outside [0, size): the device error record, raised as an
// hg::Error naming `op` at the next host synchronisation. The kernel skips that element.
struct IndexReport {
  DeviceErrorRecord* errors;
  int op;
  int64_t size;
  __device__ __forceinline__ bool ok(int64_t i, int64_t position) const {
    if (i >= 0 && i < size) [[likely]]
      return true;
    report_device_error(errors, DeviceErrorKind::IndexOutOfRange, op, position, i, size);
    return false;
  }
};

__global__ void check_indices_kernel(const int64_t* idx, int64_t m, IndexReport check) {
  HG_KERNEL_LOOP(k, m) check.ok(idx[k], k);
}

// When there is nothing to copy (an empty outer or inner extent) the indices are still checked.
void check_indices_only(const Tensor& index, int64_t m, const IndexReport& check) {
  if (m == 0) return;
  const int dev = index.device().index;
  DeviceGuard guard(dev);
  check_indices_kernel<<<grid_for(m, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
      static_cast<const int64_t*>(index.raw_data()), m, check);
  HG_CUDA_CHECK_LAUNCH();
}

// Element offsets of positions of `sizes` (row-major) under two stride sets.
struct Walk {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t a[kMaxDims] = {}, b[kMaxDims] = {};
  __device__ void offsets(int64_t k, int64_t& oa, int64_t& ob) const {
    oa = ob = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t i = k % sizes[d];
      k /= sizes[d];
      oa += i * a[d], ob += i * b[d];
    }
  }
};

Walk make_walk(const Shape& shape, const Strides& a, const Strides& b, const char* op) {
  HG_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), op, "at most {} dims on CUDA, got {}", kMaxDims,
           shape.size());
  Walk w;
  w.nd = static_cast<int>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) w.sizes[d] = shape[d], w.a[d] = a[d], w.b[d] = b[d];
  return w;
}

Strides without_dim(const Tensor& t, int64_t dim) {
  Strides s = t.strides();
  if (!s.empty()) s[static_cast<size_t>(dim)] = 0;
  return s;
}

// Atomic self += v; 1-byte types have no atomic add and run on one thread (see serial()).
template <class T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, Half>) {
    atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.bits));
  } else if constexpr (std::is_same_v<T, bool>) {
    *p = *p || v;
  } else {
    *p = static_cast<T>(*p + v);
  }
}
template <class T>
constexpr bool serial() {
  return sizeof(T) == 1;
}

template <class T>
__global__ void gather_kernel(T* out, const T* x, const int64_t* idx, int64_t n, int64_t step, Walk w,
                              IndexReport check) {
  HG_KERNEL_LOOP(k, n) {
    int64_t ox, unused;
    w.offsets(k, ox, unused);
    const int64_t j = idx[k];
    out[k] = check.ok(j, k) ? x[ox + j * step] : T{};
  }
}

template <class T>
__global__ void scatter_add_kernel(T* self, const T* src, const int64_t* idx, int64_t n, int64_t step, Walk w,
                                   IndexReport check) {
  HG_KERNEL_LOOP(k, n) {
    int64_t os, osrc;
    w.offsets(k, os, osrc);
    const int64_t j = idx[k];
    if (check.ok(j, k)) atomic_add(self + os + j * step, src[osrc]);
  }
}

std::optional<int64_t> gather_cuda(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t size = x.dim() ? x.size(dim) : 1, step = x.dim() ? x.stride(dim) : 0;
  const int64_t n = index.numel();
  if (n == 0) return std::nullopt;
  static const int op = device_error_op("gather");
  const IndexReport check{device_error_record(), op, size};
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  const Walk w = make_walk(index.shape(), without_dim(x, dim), index.strides(), "gather");
  dispatch_dtype(x.dtype(), [&]<class T>(TypeTag<T>) {
    gather_kernel<T><<<grid_for(n, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(x.raw_data()),
        static_cast<const int64_t*>(index.raw_data()), n, step, w, check);
    HG_CUDA_CHECK_LAUNCH();
  });
  return std::nullopt;
}

std::optional<int64_t> scatter_add_cuda(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t size = self.dim() ? self.size(dim) : 1, step = self.dim() ? self.stride(dim) : 0;
  const int64_t n = index.numel();
  if (n == 0) return std::nullopt;
  static const int op = device_error_op("scatter_add");
  const IndexReport check{device_error_record(), op, size};
  const int dev = self.device().index;
  DeviceGuard guard(dev);
  const Walk w = make_walk(index.shape(), without_dim(self, dim), src.strides(), "scatter_add");
  dispatch_dtype(self.dtype(), [&]<class T>(TypeTag<T>) {
    const unsigned grid = serial<T>() ? 1 : grid_for(n, kThreads, 1, dev);
    scatter_add_kernel<T><<<grid, serial<T>() ? 1 : kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(self.raw_data()), static_cast<const T*>(src.raw_data()),
        static_cast<const int64_t*>(index.raw_data()), n, step, w, check);
    HG_CUDA_CHECK_LAUNCH();
  });
  return std::nullopt;
}

template <class U>
__global__ void index_select_kernel(U* out, const U* x, const int64_t* idx, int64_t total, int64_t m, int64_t n,
                                    int64_t inner, IndexReport check) {
  HG_KERNEL_LOOP(k, total) {
    const int64_t i = k % inner, j = (k / inner) % m, o = k / (inner * m);
    const int64_t at = idx[j];
    out[k] = check.ok(at, j) ? x[(o * n + at) * inner + i] : U{};
  }
}

std::optional<int64_t> index_select_cuda(const Tensor& out, const Tensor& x, const Tensor& index, const char* op_name) {
  const int64_t outer = out.shape()[0], m = out.shape()[1], inner = out.shape()[2], n = x.shape()[1];
  const int64_t total = outer * m * inner;
  const IndexReport check{device_error_record(), device_error_op(op_name), n};
  if (total == 0) {
    check_indices_only(index, m, check);
    return std::nullopt;
  }
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  auto launch = [&]<class U>(TypeTag<U>) {
    index_select_kernel<U><<<grid_for(total, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        static_cast<U*>(out.raw_data()), static_cast<const U*>(x.raw_data()),
        static_cast<const int64_t*>(index.raw_data()), total, m, n, inner, check);
    HG_CUDA_CHECK_LAUNCH();
  };
  switch (element_size(x.dtype())) {  // a copy: only the width matters
    case 1: launch(TypeTag<uint8_t>{}); break;
    case 2: launch(TypeTag<uint16_t>{}); break;
    case 4: launch(TypeTag<uint32_t>{}); break;
    default: launch(TypeTag<uint64_t>{}); break;
  }
  return std::nullopt;
}

template <class T>
__global__ void index_add_kernel(T* self, const T* src, const int64_t* idx, int64_t total, int64_t m, int64_t n,
                                 int64_t inner, IndexReport check) {
  HG_KERNEL_LOOP(k, total) {
    const int64_t i = k % inner, j = (k / inner) % m, o = k / (inner * m);
    const int64_t at = idx[j];
    if (check.ok(at, j)) atomic_add(self + (o * n + at) * inner + i, src[k]);
  }
}

std::optional<int64_t> index_add_cuda(const Tensor& self, const Tensor& index, const Tensor& src) {
  const int64_t outer = self.shape()[0], n = self.shape()[1], inner = self.shape()[2], m = src.shape()[1];
  const int64_t total = outer * m * inner;
  static const int op = device_error_op("index_add");
  const IndexReport check{device_error_record(), op, n};
  if (total == 0) {
    check_indices_only(index, m, check);
    return std::nullopt;
  }
  const int dev = self.device().index;
  DeviceGuard guard(dev);
  dispatch_dtype(self.dtype(), [&]<class T>(TypeTag<T>) {
    const unsigned grid = serial<T>() ? 1 : grid_for(total, kThreads, 1, dev);
    index_add_kernel<T><<<grid, serial<T>() ? 1 : kThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(self.raw_data()), static_cast<const T*>(src.raw_data()),
        static_cast<const int64_t*>(index.raw_data()), total, m, n, inner, check);
    HG_CUDA_CHECK_LAUNCH();
  });
  return std::nullopt;
}

template <class T>
__global__ void where_kernel(Geometry<4> g, char* out, const char* cond, const char* a, const char* b) {
  HG_KERNEL_LOOP(i, g.numel) {
    int64_t off[4];
    g.offsets(i, off);
    const bool c = *reinterpret_cast<const bool*>(cond + off[1]);
    *reinterpret_cast<T*>(out + off[0]) = *reinterpret_cast<const T*>(c ? a + off[2] : b + off[3]);
  }
}

void where_cuda(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Geometry<4> g = make_geometry<4>(out.shape(), {&out, &cond, &a, &b}, "where");
  if (g.numel == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  dispatch_dtype(out.dtype(), [&]<class T>(TypeTag<T>) {
    where_kernel<T><<<grid_for(g.numel, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(
        g, static_cast<char*>(out.raw_data()), static_cast<const char*>(cond.raw_data()),
        static_cast<const char*>(a.raw_data()), static_cast<const char*>(b.raw_data()));
    HG_CUDA_CHECK_LAUNCH();
  });
}

template <class T, class A>
struct ClampFn {
  A lo, hi;
  __device__ __forceinline__ T operator()(T x) const {
    // max then min, as PyTorch and the CPU kernel: NaN fails both tests and stays.
    A v = static_cast<A>(to_acc(x));
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    if constexpr (std::is_integral_v<T>) {
      return v;
    } else {
      return from_acc<T>(v);
    }
  }
};

void clamp_cuda(const Tensor& out, const Tensor& in, std::optional<double> lo, std::optional<double> hi) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      fail("clamp", "not supported on bool tensors");
    } else {
      using A = std::conditional_t<std::is_integral_v<T>, T, acc_t<T>>;
      constexpr A kLow = std::is_integral_v<A> ? std::numeric_limits<A>::lowest() : -std::numeric_limits<A>::infinity();
      constexpr A kHigh = std::is_integral_v<A> ? std::numeric_limits<A>::max() : std::numeric_limits<A>::infinity();
      launch_unary<T, T>(out, in, ClampFn<T, A>{lo ? static_cast<A>(*lo) : kLow, hi ? static_cast<A>(*hi) : kHigh},
                         "clamp");
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(gather_stub, kCUDA, gather_cuda);
HG_REGISTER_KERNEL(scatter_add_stub, kCUDA, scatter_add_cuda);
HG_REGISTER_KERNEL(index_select_stub, kCUDA, index_select_cuda);
HG_REGISTER_KERNEL(index_add_stub, kCUDA, index_add_cuda);
HG_REGISTER_KERNEL(where_stub, kCUDA, where_cuda);
HG_REGISTER_KERNEL(clamp_stub, kCUDA, clamp_cuda);

}  // namespace hg::cuda
