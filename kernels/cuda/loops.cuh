// The CUDA elementwise engine: device-side conversions for the 16-bit floats, the geometry of
// N same-shaped operands (size-1 dims dropped, mergeable dims merged, as the CPU loops do), and
// kernels for unary and binary maps: a vectorised one for contiguous operands (0-stride scalars
// allowed) and a strided one for everything else (broadcast and transposed views included).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "framework/tensor.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {

inline constexpr int kMaxDims = 12;  // after merging; deeper geometries throw
inline constexpr int kThreads = 256;
// Elements per vector access in the contiguous kernels: 16 bytes of the widest operand type
// (8 float16s, 4 floats, 2 doubles, 16 bools), the widest load or store one thread can issue.
template <class... Ts>
inline constexpr int kVec = static_cast<int>(16 / std::max({sizeof(Ts)...}));

// ---- conversions (device) ----
template <class T>
__device__ __forceinline__ acc_t<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return __half2float(__ushort_as_half(v.bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return __bfloat162float(__ushort_as_bfloat16(v.bits));
  } else {
    return v;
  }
}

template <class T>
__device__ __forceinline__ T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half::from_bits(__half_as_ushort(__float2half_rn(v)));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16::from_bits(__bfloat16_as_ushort(__float2bfloat16_rn(v)));
  } else {
    return v;
  }
}

// The CPU copy's conversion rules (kernels/cpu/copy.cpp): 16-bit floats go through float,
// anything non-zero is true. The float8 types convert with framework/float8.h's host-device code,
// the CPU's, so both give the same bits.
template <class To, class From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_float8_v<From>) {
    const float f = From::to_float(v.bits);
    if constexpr (std::is_same_v<To, bool>) {
      return f != 0.0f;
    } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
      return from_acc<To>(f);
    } else {
      return static_cast<To>(f);
    }
  } else if constexpr (is_float8_v<To>) {
    return To::from_bits(To::from_float(static_cast<float>(to_acc(v))));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    const float f = to_acc(v);
    if constexpr (std::is_same_v<To, bool>) {
      return f != 0.0f;
    } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
      return from_acc<To>(f);
    } else {
      return static_cast<To>(f);
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return from_acc<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// ---- geometry ----
template <int N>
struct Geometry {
  int ndim = 0;
  int64_t numel = 1;
  int64_t sizes[kMaxDims] = {};       // innermost last
  int64_t strides[N][kMaxDims] = {};  // in bytes, per operand

  // Byte offsets of element `linear` (row-major over sizes) in each operand.
  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }

  // Operand k is a dense run (stride = element size) or a scalar (stride 0) along one dim.
  bool flat(int k, int64_t esize) const { return ndim == 1 && (strides[k][0] == esize || strides[k][0] == 0); }
  bool scalar(int k) const { return ndim == 1 && strides[k][0] == 0; }
};

template <int N>
Geometry<N> make_geometry(const Shape& shape, const std::array<const Tensor*, N>& ops, const char* op) {
  Geometry<N> g;
  for (int64_t s : shape) g.numel *= s;
  // In operand 0's memory order, as the CPU's StridedGeometry: channels-last operands alike merge
  // into one dense run and take the vectorised kernels.
  for (size_t d : dims_in_memory_order(shape, ops[0]->strides())) {
    int64_t st[N];
    for (int k = 0; k < N; ++k) st[k] = ops[k]->strides()[d] * static_cast<int64_t>(element_size(ops[k]->dtype()));
    bool merge = g.ndim > 0;
    for (int k = 0; k < N && merge; ++k) merge = g.strides[k][g.ndim - 1] == st[k] * shape[d];
    if (merge) {
      g.sizes[g.ndim - 1] *= shape[d];
      for (int k = 0; k < N; ++k) g.strides[k][g.ndim - 1] = st[k];
    } else {
      HG_CHECK(g.ndim < kMaxDims, op, "tensors of shape {} have more than {} non-mergeable dims on CUDA", shape,
               kMaxDims);
      g.sizes[g.ndim] = shape[d];
      for (int k = 0; k < N; ++k) g.strides[k][g.ndim] = st[k];
      ++g.ndim;
    }
  }
  if (g.ndim == 0) {  // a single element
    g.ndim = 1;
    g.sizes[0] = 1;
    for (int k = 0; k < N; ++k) g.strides[k][0] = static_cast<int64_t>(element_size(ops[k]->dtype()));
  }
  return g;
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <class T, int V>
struct alignas(sizeof(T) * V) VecOf {
  T v[V];
};

// ---- unary map: out[i] = f(in[i]) ----
template <class Out, class In, class F>
__global__ void unary_flat_kernel(int64_t n, Out* __restrict__ out, const In* __restrict__ in, bool in_scalar, F f) {
  const int64_t nvec = n / kVec<Out, In>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (in_scalar) {
    const Out v = f(in[0]);
    for (int64_t i = tid; i < n; i += stride) out[i] = v;
    return;
  }
  for (int64_t i = tid; i < nvec; i += stride) {
    const auto x = reinterpret_cast<const VecOf<In, kVec<Out, In>>*>(in)[i];
    VecOf<Out, kVec<Out, In>> y;
#pragma unroll
    for (int j = 0; j < kVec<Out, In>; ++j) y.v[j] = f(x.v[j]);
    reinterpret_cast<VecOf<Out, kVec<Out, In>>*>(out)[i] = y;
  }
  for (int64_t i = nvec * kVec<Out, In> + tid; i < n; i += stride) out[i] = f(in[i]);
}

template <class Out, class In, class F>
__global__ void unary_strided_kernel(Geometry<2> g, char* out, const char* in, F f) {
  HG_KERNEL_LOOP(i, g.numel) {
    int64_t off[2];
    g.offsets(i, off);
    *reinterpret_cast<Out*>(out + off[0]) = f(*reinterpret_cast<const In*>(in + off[1]));
  }
}

template <class Out, class In, class F>
void launch_unary(const Tensor& out, const Tensor& in, F f, const char* op) {
  const Geometry<2> g = make_geometry<2>(out.shape(), {&out, &in}, op);
  if (g.numel == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  void* o = out.raw_data();
  const void* a = in.raw_data();
  if (g.flat(0, sizeof(Out)) && !g.scalar(0) && g.flat(1, sizeof(In)) && aligned(o, sizeof(Out) * kVec<Out, In>) &&
      aligned(a, sizeof(In) * kVec<Out, In>)) {
    unary_flat_kernel<Out, In, F><<<grid_for(g.numel, kThreads, kVec<Out, In>, dev), kThreads, 0, stream>>>(
        g.numel, static_cast<Out*>(o), static_cast<const In*>(a), g.scalar(1), f);
  } else {
    unary_strided_kernel<Out, In, F><<<grid_for(g.numel, kThreads, 1, dev), kThreads, 0, stream>>>(
        g, static_cast<char*>(o), static_cast<const char*>(a), f);
  }
  HG_CUDA_CHECK_LAUNCH();
}

// ---- binary map: out[i] = f(a[i], b[i]) ----
template <class Out, class In, class F>
__global__ void binary_flat_kernel(int64_t n, Out* __restrict__ out, const In* __restrict__ a, const In* __restrict__ b,
                                   bool a_scalar, bool b_scalar, F f) {
  const int64_t nvec = n / kVec<Out, In>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const In a0 = a[0], b0 = b[0];
  for (int64_t i = tid; i < nvec; i += stride) {
    VecOf<In, kVec<Out, In>> x, y;
    if (a_scalar) {
#pragma unroll
      for (int j = 0; j < kVec<Out, In>; ++j) x.v[j] = a0;
    } else {
      x = reinterpret_cast<const VecOf<In, kVec<Out, In>>*>(a)[i];
    }
    if (b_scalar) {
#pragma unroll
      for (int j = 0; j < kVec<Out, In>; ++j) y.v[j] = b0;
    } else {
      y = reinterpret_cast<const VecOf<In, kVec<Out, In>>*>(b)[i];
    }
    VecOf<Out, kVec<Out, In>> z;
#pragma unroll
    for (int j = 0; j < kVec<Out, In>; ++j) z.v[j] = f(x.v[j], y.v[j]);
    reinterpret_cast<VecOf<Out, kVec<Out, In>>*>(out)[i] = z;
  }
  for (int64_t i = nvec * kVec<Out, In> + tid; i < n; i += stride)
    out[i] = f(a_scalar ? a0 : a[i], b_scalar ? b0 : b[i]);
}

template <class Out, class In, class F>
__global__ void binary_strided_kernel(Geometry<3> g, char* out, const char* a, const char* b, F f) {
  HG_KERNEL_LOOP(i, g.numel) {
    int64_t off[3];
    g.offsets(i, off);
    *reinterpret_cast<Out*>(out + off[0]) =
        f(*reinterpret_cast<const In*>(a + off[1]), *reinterpret_cast<const In*>(b + off[2]));
  }
}

template <class Out, class In, class F>
void launch_binary(const Tensor& out, const Tensor& a, const Tensor& b, F f, const char* op) {
  const Geometry<3> g = make_geometry<3>(out.shape(), {&out, &a, &b}, op);
  if (g.numel == 0) return;
  const int dev = out.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  void* o = out.raw_data();
  const void *pa = a.raw_data(), *pb = b.raw_data();
  const bool flat = g.flat(0, sizeof(Out)) && !g.scalar(0) && g.flat(1, sizeof(In)) && g.flat(2, sizeof(In)) &&
                    aligned(o, sizeof(Out) * kVec<Out, In>) &&
                    (g.scalar(1) || aligned(pa, sizeof(In) * kVec<Out, In>)) &&
                    (g.scalar(2) || aligned(pb, sizeof(In) * kVec<Out, In>));
  if (flat) {
    binary_flat_kernel<Out, In, F><<<grid_for(g.numel, kThreads, kVec<Out, In>, dev), kThreads, 0, stream>>>(
        g.numel, static_cast<Out*>(o), static_cast<const In*>(pa), static_cast<const In*>(pb), g.scalar(1), g.scalar(2),
        f);
  } else {
    binary_strided_kernel<Out, In, F><<<grid_for(g.numel, kThreads, 1, dev), kThreads, 0, stream>>>(
        g, static_cast<char*>(o), static_cast<const char*>(pa), static_cast<const char*>(pb), f);
  }
  HG_CUDA_CHECK_LAUNCH();
}

}  // namespace hg::cuda
