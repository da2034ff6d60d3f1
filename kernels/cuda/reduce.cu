// CUDA reductions over the last dim of a contiguous [outer, inner] tensor: sum (float32
// accumulation for 16-bit and 32-bit floats, float64 for float64, int64 for integers), max/min
// and argmax/argmin (first extreme wins, NaN wins over everything, as on the CPU). A warp per
// row for short rows, a block per row for long ones, and a few very long rows (full sums) split
// across blocks with a second pass over the partial sums. Column sums (sum over leading dims, bias
// gradients) tile 32 columns per block and split long columns across blocks.
#include <algorithm>
#include <limits>

#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/reduce_kernels.h"
#include "kernels/cuda/column_sum.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kReduceThreads = 256;
constexpr int64_t kWarpRowLimit = 512;  // rows up to this length get one warp each

template <class T>
using SumAcc = std::conditional_t<std::is_same_v<T, double> || std::is_integral_v<T>,
                                  std::conditional_t<std::is_floating_point_v<T>, double, int64_t>, float>;
// The type extremes are compared in: float for 16-bit floats, a shuffle-able integer for small ints.
template <class T>
using CmpT = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>,
                                std::conditional_t<std::is_same_v<T, int64_t>, long long, int>>;

template <class V>
__device__ __forceinline__ V shfl_xor(V v, int mask) {
  if constexpr (std::is_same_v<V, int64_t>) {
    return static_cast<V>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask));
  } else {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  }
}

// Sum across a group of G threads (a warp, or the whole block when G == kReduceThreads);
// every thread of the group gets the total.
template <int G, class V>
__device__ V group_sum(V v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
  if constexpr (G > 32) {
    __shared__ V partial[G / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = V(0);
    for (int w = 0; w < G / 32; ++w) v += partial[w];
    __syncthreads();  // partial is reused by the next row
  }
  return v;
}

template <class V>
struct Candidate {
  V v;
  int64_t i;  // -1: no element yet
};

// The better of two candidates: NaN beats numbers, then the larger (smaller) value, and on a
// tie the lower index, so the result is the first extreme as in a sequential scan.
template <class V>
__device__ __forceinline__ Candidate<V> pick(Candidate<V> a, Candidate<V> b, bool want_max) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
  if (a_nan || b_nan) return (a_nan && b_nan) ? (a.i < b.i ? a : b) : (a_nan ? a : b);
  if (a.v == b.v) return a.i < b.i ? a : b;
  return (want_max ? a.v > b.v : a.v < b.v) ? a : b;
}

template <int G, class V>
__device__ Candidate<V> group_pick(Candidate<V> c, bool want_max) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Candidate<V> other{shfl_xor(c.v, o),
                       static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(c.i), o))};
    c = pick(c, other, want_max);
  }
  if constexpr (G > 32) {
    __shared__ Candidate<V> partial[G / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = c;
    __syncthreads();
    c = partial[0];
    for (int w = 1; w < G / 32; ++w) c = pick(c, partial[w], want_max);
    __syncthreads();
  }
  return c;
}

// Stores a sum as the CPU kernel does: through out's accumulation type, rounded once.
template <class Acc>
__device__ void store_sum(void* out, int64_t r, Dtype dtype, Acc s) {
  switch (dtype) {
    case kFloat32: static_cast<float*>(out)[r] = static_cast<float>(s); break;
    case kFloat16: static_cast<Half*>(out)[r] = from_acc<Half>(static_cast<float>(s)); break;
    case kBFloat16: static_cast<BFloat16*>(out)[r] = from_acc<BFloat16>(static_cast<float>(s)); break;
    case kFloat64: static_cast<double*>(out)[r] = static_cast<double>(s); break;
    case kInt64: static_cast<int64_t*>(out)[r] = static_cast<int64_t>(s); break;
    case kInt32: static_cast<int32_t*>(out)[r] = static_cast<int32_t>(s); break;
    case kUInt8: static_cast<uint8_t*>(out)[r] = static_cast<uint8_t>(s); break;
    case kBool: static_cast<bool*>(out)[r] = static_cast<bool>(s); break;
  }
}

// Each group of G threads reduces one row at a time; rows are strided over the grid.
template <class T, int G>
__global__ void sum_rows_kernel(int64_t outer, int64_t inner, const T* __restrict__ in, void* out, Dtype out_dtype,
                                bool vec) {
  using Acc = SumAcc<T>;
  constexpr int kGroups = kReduceThreads / G;
  const int lane = threadIdx.x % G;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kGroups + threadIdx.x / G; row < outer;
       row += static_cast<int64_t>(gridDim.x) * kGroups) {
    const T* p = in + row * inner;
    Acc s = 0;
    if (vec) {
      const auto* pv = reinterpret_cast<const VecOf<T, kVec<T>>*>(p);
      for (int64_t i = lane; i < inner / kVec<T>; i += G) {
        const auto x = pv[i];
#pragma unroll
        for (int j = 0; j < kVec<T>; ++j) s += static_cast<Acc>(to_acc(x.v[j]));
      }
    } else {
      for (int64_t i = lane; i < inner; i += G) s += static_cast<Acc>(to_acc(p[i]));
    }
    s = group_sum<G>(s);
    if (lane == 0) store_sum(out, row, out_dtype, s);
  }
}

// Column sums: a block is 32 columns (threadIdx.x, adjacent in memory when stride_j is 1) by
// kColumnRows threads walking rows of one chunk; the kColumnRows partial sums meet in shared
// memory. With `partial`, each block row (blockIdx.y) writes its sums there ([gridDim.y, cols],
// accumulation type) for a second pass; otherwise the result goes to out.
constexpr int kColumnRows = 8;

template <class T, class Acc>
__global__ void column_sum_kernel(int64_t len, int64_t cols, int64_t stride_i, int64_t stride_j,
                                  const T* __restrict__ in, int64_t chunk, Acc* __restrict__ partial, void* out,
                                  Dtype out_dtype) {
  __shared__ Acc tile[kColumnRows][33];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t i1 = i0 + chunk < len ? i0 + chunk : len;
  Acc s = 0;
  if (j < cols) {
    for (int64_t i = i0 + threadIdx.y; i < i1; i += kColumnRows)
      s += static_cast<Acc>(to_acc(in[i * stride_i + j * stride_j]));
  }
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    for (int y = 1; y < kColumnRows; ++y) s += tile[y][threadIdx.x];
    if (partial) {
      partial[static_cast<int64_t>(blockIdx.y) * cols + j] = s;
    } else {
      store_sum(out, j, out_dtype, s);
    }
  }
}

template <class T>
void column_sum_typed(const T* x, int64_t len, int64_t cols, int64_t stride_i, int64_t stride_j, Dtype out_dtype,
                      void* out, int dev) {
  using Acc = SumAcc<T>;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const dim3 block(32, kColumnRows);
  const int64_t col_blocks = (cols + 31) / 32;
  HG_CHECK(col_blocks <= INT32_MAX, "sum", "{} columns are more than one launch covers", cols);
  // Enough blocks for about 4 per SM; each chunk at least 64 rows so the second pass stays small.
  const int64_t want =
      std::max<int64_t>(1, static_cast<int64_t>(device_properties(dev).multiProcessorCount) * 4 / col_blocks);
  const int64_t splits = std::clamp<int64_t>(std::min(want, (len + 63) / 64), 1, 65535);
  const int64_t chunk = (len + splits - 1) / splits;
  if (splits == 1) {
    column_sum_kernel<T, Acc><<<dim3(static_cast<unsigned>(col_blocks), 1), block, 0, stream>>>(
        len, cols, stride_i, stride_j, x, chunk, nullptr, out, out_dtype);
    HG_CUDA_CHECK_LAUNCH();
    return;
  }
  // Partial sums in the accumulation type; freed at once: the caching allocator hands the block
  // out again only to later work on this stream, which runs after these kernels.
  const Dtype acc_dtype = std::is_same_v<Acc, double> ? kFloat64 : std::is_same_v<Acc, int64_t> ? kInt64 : kFloat32;
  const Tensor partial = empty({splits, cols}, TensorOptions(acc_dtype).device(Device(kCUDA, dev)));
  auto* p = static_cast<Acc*>(partial.raw_data());
  column_sum_kernel<T, Acc>
      <<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits)), block, 0, stream>>>(
          len, cols, stride_i, stride_j, x, chunk, p, nullptr, out_dtype);
  HG_CUDA_CHECK_LAUNCH();
  column_sum_kernel<Acc, Acc><<<dim3(static_cast<unsigned>(col_blocks), 1), block, 0, stream>>>(
      splits, cols, cols, 1, p, splits, nullptr, out, out_dtype);
  HG_CUDA_CHECK_LAUNCH();
}

// A few long rows (a full sum(x) is one row): each row is cut into `gridDim.x` chunks, a block
// sums one chunk into partial[row, chunk] (accumulation type), and sum_rows_kernel adds the
// partials. One block per row would leave all but one SM idle.
template <class T>
__global__ void sum_split_kernel(int64_t inner, int64_t chunk, const T* __restrict__ in,
                                 SumAcc<T>* __restrict__ partial) {
  using Acc = SumAcc<T>;
  const T* p = in + static_cast<int64_t>(blockIdx.y) * inner;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t i1 = i0 + chunk < inner ? i0 + chunk : inner;
  Acc s = 0;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += kReduceThreads) s += static_cast<Acc>(to_acc(p[i]));
  s = group_sum<kReduceThreads>(s);
  if (threadIdx.x == 0) partial[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = s;
}

template <class T, int G>
__global__ void extreme_rows_kernel(int64_t outer, int64_t inner, const T* __restrict__ in, ReduceOp op, void* out) {
  using V = CmpT<T>;
  constexpr int kGroups = kReduceThreads / G;
  const bool want_max = op == ReduceOp::Max || op == ReduceOp::ArgMax;
  const bool want_index = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  const int lane = threadIdx.x % G;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kGroups + threadIdx.x / G; row < outer;
       row += static_cast<int64_t>(gridDim.x) * kGroups) {
    const T* p = in + row * inner;
    Candidate<V> best{V(0), -1};
    for (int64_t i = lane; i < inner; i += G)
      best = pick(best, Candidate<V>{static_cast<V>(to_acc(p[i])), i}, want_max);
    best = group_pick<G>(best, want_max);
    if (lane == 0) {
      const int64_t at = best.i < 0 ? 0 : best.i;
      if (want_index) {
        static_cast<int64_t*>(out)[row] = at;
      } else if (best.i >= 0) {
        static_cast<T*>(out)[row] = p[at];  // the stored element itself, NaN payload included
      }
    }
  }
}

template <class T>
void reduce_typed(ReduceOp op, const Tensor& out, const Tensor& in) {
  const int64_t outer = in.shape()[0], inner = in.shape()[1];
  if (outer == 0) return;
  const int dev = in.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const T* data = static_cast<const T*>(in.raw_data());
  const bool warp_rows = inner <= kWarpRowLimit;
  const int64_t rows_per_block = warp_rows ? kReduceThreads / 32 : 1;
  const int64_t cap = static_cast<int64_t>(device_properties(dev).multiProcessorCount) * 16;
  const auto grid = static_cast<unsigned>(std::min((outer + rows_per_block - 1) / rows_per_block, cap));
  const int64_t sms = device_properties(dev).multiProcessorCount;
  if (op == ReduceOp::Sum && outer * 4 <= sms && outer <= 65535 && inner >= (int64_t{1} << 16)) {
    using Acc = SumAcc<T>;
    const int64_t splits = std::min<int64_t>(std::max<int64_t>(sms * 4 / outer, 2), inner / 4096);
    const int64_t chunk = (inner + splits - 1) / splits;
    const Dtype acc_dtype = std::is_same_v<Acc, double> ? kFloat64 : std::is_same_v<Acc, int64_t> ? kInt64 : kFloat32;
    const Tensor partial = empty({outer, splits}, TensorOptions(acc_dtype).device(in.device()));
    auto* p = static_cast<Acc*>(partial.raw_data());
    sum_split_kernel<T>
        <<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(outer)), kReduceThreads, 0, stream>>>(inner, chunk,
                                                                                                           data, p);
    HG_CUDA_CHECK_LAUNCH();
    // The partials of a row are contiguous: one warp per row adds them (freed at once, reused
    // only by later work on this stream).
    sum_rows_kernel<Acc, 32><<<static_cast<unsigned>((outer + 7) / 8), kReduceThreads, 0, stream>>>(
        outer, splits, p, out.raw_data(), out.dtype(), false);
    HG_CUDA_CHECK_LAUNCH();
    return;
  }
  if (op == ReduceOp::Sum) {
    const bool vec = inner % kVec<T> == 0 && aligned(data, sizeof(T) * kVec<T>);
    if (warp_rows) {
      sum_rows_kernel<T, 32><<<grid, kReduceThreads, 0, stream>>>(outer, inner, data, out.raw_data(), out.dtype(), vec);
    } else {
      sum_rows_kernel<T, kReduceThreads>
          <<<grid, kReduceThreads, 0, stream>>>(outer, inner, data, out.raw_data(), out.dtype(), vec);
    }
  } else {
    HG_CHECK(inner > 0, "max", "cannot reduce an empty dim of shape {}", in.shape());
    if (warp_rows) {
      extreme_rows_kernel<T, 32><<<grid, kReduceThreads, 0, stream>>>(outer, inner, data, op, out.raw_data());
    } else {
      extreme_rows_kernel<T, kReduceThreads>
          <<<grid, kReduceThreads, 0, stream>>>(outer, inner, data, op, out.raw_data());
    }
  }
  HG_CUDA_CHECK_LAUNCH();
}

void reduce_cuda(ReduceOp op, const Tensor& out, const Tensor& in) {
  HG_CHECK(in.dim() == 2 && in.is_contiguous(), "reduce", "expected a contiguous [outer, inner] tensor, got shape {}",
           in.shape());
  HG_CHECK(out.device() == in.device() && out.is_contiguous(), "reduce",
           "expected a contiguous output on {}, got one on {}", in.device(), out.device());
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) { reduce_typed<T>(op, out, in); });
}

void sum_columns_cuda(const Tensor& out, const Tensor& in) {
  HG_CHECK(in.dim() == 2 && in.is_contiguous(), "sum", "expected a contiguous [rows, cols] tensor, got shape {}",
           in.shape());
  HG_CHECK(out.device() == in.device() && out.is_contiguous() && out.numel() == in.shape()[1], "sum",
           "expected a contiguous output of {} elements on {}", in.shape()[1], in.device());
  column_sum(in.dtype(), in.raw_data(), in.shape()[0], in.shape()[1], in.shape()[1], 1, out.dtype(), out.raw_data(),
             in.device().index);
}

}  // namespace

void column_sum(Dtype in_dtype, const void* x, int64_t len, int64_t cols, int64_t stride_i, int64_t stride_j,
                Dtype out_dtype, void* out, int device) {
  if (cols == 0) return;
  if (len == 0) {
    DeviceGuard guard(device);
    HG_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(cols) * element_size(out_dtype), current_stream(device)));
    return;
  }
  dispatch_dtype(in_dtype, [&]<class T>(TypeTag<T>) {
    column_sum_typed<T>(static_cast<const T*>(x), len, cols, stride_i, stride_j, out_dtype, out, device);
  });
}

HG_REGISTER_KERNEL(reduce_stub, kCUDA, reduce_cuda);
HG_REGISTER_KERNEL(sum_columns_stub, kCUDA, sum_columns_cuda);

}  // namespace hg::cuda
