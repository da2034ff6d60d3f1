// Block-wide sums and maxima for the row kernels (softmax, norms, losses): a warp shuffle tree,
// then one value per warp through shared memory. Every thread of the block gets the result.
#pragma once

#include <cuda_runtime.h>

namespace hg::cuda {

template <class V>
__device__ __forceinline__ V warp_sum(V v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// NaN wins, so a row holding NaN normalises to NaN as on the CPU.
template <class V>
__device__ __forceinline__ V nan_max(V a, V b) {
  return (a != a || a > b) ? a : b;
}

template <class V>
__device__ __forceinline__ V warp_max(V v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// blockDim.x must be a multiple of 32 (at most 1024). `scratch` holds 32 values; the function
// synchronises before returning so the scratch can be reused at once.
template <class V>
__device__ V block_sum(V v, V* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  V total = V(0);
  for (int w = 0; w < warps; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

template <class V>
__device__ V block_max(V v, V* scratch) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  V m = scratch[0];
  for (int w = 1; w < warps; ++w) m = nan_max(m, scratch[w]);
  __syncthreads();
  return m;
}

}  // namespace hg::cuda
