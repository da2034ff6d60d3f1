// Device pieces shared by the flash-attention forward and backward kernels: the parameter block,
// the 16-bit types the tensor cores take, tile loads from strided global memory into padded
// shared memory, and the scaled, masked score of one (query, key) pair.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifndef HG_FLASH_EMULATION  // tests/flash_emulation compiles the kernels for the CPU with its own wmma
#include <mma.h>
#endif

#include <cstdint>

#include "framework/half.h"
#include "kernels/common/flash_attention_tiles.h"

namespace hg::cuda::flash {

namespace wmma = nvcuda::wmma;

inline constexpr int kWarps = 4, kThreads = 32 * kWarps;
inline constexpr int kRows = static_cast<int>(kFlashRows), kCols = static_cast<int>(kFlashCols);
static_assert(kRows == 16 * kWarps && kCols == 64, "each warp owns 16 rows; 2 lanes per row split 64 columns");
// Shared-memory rows are padded so that consecutive rows start in different banks while every
// 16x16 fragment still starts on the 32-byte boundary wmma requires: 8 elements for 16-bit
// tiles, 4 for float tiles.
inline constexpr int kPadHalf = 8, kPadFloat = 4;

// A [B, H, N, D] tensor: its data and element strides, and whether rows can be read 16 bytes at
// a time (unit feature stride, 8-aligned row strides and base, D a multiple of 8).
struct Operand {
  const void* data;
  int64_t s0, s1, s2, s3;
  bool vec;
};

struct Params {
  int64_t B, H, L, S, E, Ev;
  float scale;
  bool causal;
  int mask_kind;  // 0 none, 1 bool, 2 additive float32
  const void* mask;
  int64_t m0, m1, m2, m3;
};

// The device type of a 16-bit float and its conversions.
template <class T>
struct Wide;
template <>
struct Wide<Half> {
  using W = __half;
  static __device__ __forceinline__ W from(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ float to(W x) { return __half2float(x); }
};
template <>
struct Wide<BFloat16> {
  using W = __nv_bfloat16;
  static __device__ __forceinline__ W from(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ float to(W x) { return __bfloat162float(x); }
};

// Rows n0 .. n0 + 64 of the (b, h) slice of `op` (N rows of `dim` features) into dst [64][D + pad],
// zeros past N and past dim (the padded head dim and the tail tile contribute nothing).
template <class T, int D>
__device__ __forceinline__ void load_tile(typename Wide<T>::W* dst, const Operand& op, int64_t b, int64_t h, int64_t n0,
                                          int64_t N, int64_t dim) {
  using W = typename Wide<T>::W;
  constexpr int ld = D + kPadHalf;
  const W* base = static_cast<const W*>(op.data) + b * op.s0 + h * op.s1;
  if (op.vec) {
    constexpr int kChunks = D / 8;  // 8 elements = 16 bytes per load
    for (int x = threadIdx.x; x < 64 * kChunks; x += kThreads) {
      const int r = x / kChunks, d = (x % kChunks) * 8;
      const int64_t n = n0 + r;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (n < N && d < dim) val = *reinterpret_cast<const uint4*>(base + n * op.s2 + d);
      *reinterpret_cast<uint4*>(dst + r * ld + d) = val;
    }
  } else {
    for (int x = threadIdx.x; x < 64 * D; x += kThreads) {
      const int r = x / D, d = x % D;
      const int64_t n = n0 + r;
      dst[r * ld + d] = (n < N && d < dim) ? base[n * op.s2 + d * op.s3] : Wide<T>::from(0.0f);
    }
  }
}

// The score of query i and key j from their raw dot product: scaled, then masked (-inf past the
// ends, above the causal diagonal, where a bool mask is false) or shifted by an additive mask.
__device__ __forceinline__ float masked_score(const Params& p, int64_t b, int64_t h, int64_t i, int64_t j, float raw) {
  if (i >= p.L || j >= p.S || (p.causal && j > i)) return -INFINITY;
  float s = raw * p.scale;
  if (p.mask_kind) {
    const int64_t off = b * p.m0 + h * p.m1 + i * p.m2 + j * p.m3;
    if (p.mask_kind == 1) {
      if (!static_cast<const bool*>(p.mask)[off]) s = -INFINITY;
    } else {
      s += static_cast<const float*>(p.mask)[off];
    }
  }
  return s;
}

// exp(x - y) as one FMA and a base-2 exponential (the hardware's ex2): the softmax's elementwise
// work is what a tensor-core attention kernel is short of, not the products. exp(-inf) is 0.
__device__ __forceinline__ float exp_diff(float x, float y) {
  constexpr float kLog2e = 1.4426950408889634f;
  return exp2f(fmaf(x, kLog2e, -y * kLog2e));
}

// Stores a warp's 16 x D float tile (ld D + kPadFloat, in shared memory) scaled by `mul` into rows
// n0 .. n0 + 16 of the (b, h) slice of out (N rows, dim features, any strides): two lanes a row.
template <class T, int D>
__device__ __forceinline__ void store_rows(void* out, const Operand& op, int64_t b, int64_t h, int64_t n0, int64_t N,
                                           int64_t dim, const float* tile, int lane, float mul_row) {
  using W = typename Wide<T>::W;
  constexpr int ld = D + kPadFloat;
  const int r = lane >> 1, c0 = (lane & 1) * (D / 2);
  const int64_t n = n0 + r;
  if (n >= N) return;
  W* base = static_cast<W*>(out) + b * op.s0 + h * op.s1 + n * op.s2;
  for (int c = c0; c < c0 + D / 2; ++c)
    if (c < dim) base[c * op.s3] = Wide<T>::from(tile[r * ld + c] * mul_row);
}

// Dynamic shared memory of the kernels for head dim D (host and device).
template <int D>
constexpr size_t forward_smem_bytes() {
  return size_t{3} * kRows * (D + kPadHalf) * 2     // Q, K, V tiles (K and V: O's scratch at the end)
         + size_t{kRows} * (kCols + kPadFloat) * 4  // S (16 rows a warp)
         + size_t{kRows} * (kCols + kPadHalf) * 2   // P in 16 bits
         + size_t{kRows} * 4;                       // the rescale factor of each row
}
template <int D>
constexpr size_t backward_smem_bytes() {                // both backward kernels use this layout
  return size_t{4} * kRows * (D + kPadHalf) * 2         // K, V, Q, dO tiles
         + size_t{2} * kRows * (kCols + kPadFloat) * 4  // S and dP (then P and dS over them)
         + size_t{2} * kRows * 4;                       // lse and D of the query tile
}

}  // namespace hg::cuda::flash
