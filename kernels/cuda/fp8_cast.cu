// The fused fp8 cast of an fp8 GEMM's operand on CUDA: one pass reads x, writes the saturating
// scaled cast in x's layout and/or transposed (the K-major copy Hopper's fp8 GEMM needs for dgrad
// and wgrad), and folds max |x| into the amax slot with one atomic per warp. No host sync: the
// scale is read on the device. The CPU reference is kernels/cpu/fp8_cast.cpp (the same element
// rule from framework/float8.h, so the codes are the same bits).
#include "framework/float8.h"
#include "framework/ops/fp8_kernels.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kTile = 32;     // a 32 x 32 tile per block
constexpr int kTileRows = 8;  // blockDim (32, 8): each thread treats 4 rows of the tile

// Tiles along rows in gridDim.x (up to 2^31 - 1), along columns in gridDim.y (up to 65535).
template <class T, class F8>
__global__ void fp8_cast_transpose_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                          const float* __restrict__ scale, uint8_t* __restrict__ out,
                                          uint8_t* __restrict__ out_t, float* __restrict__ amax) {
  __shared__ uint8_t tile[kTile][kTile + 4];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, c0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const float s = *scale;
  float local = 0.0f;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const float v = static_cast<float>(to_acc(x[r * cols + c]));
      local = fmaxf(local, fabsf(v));  // fmaxf drops NaN, as the CPU's amax
      const uint8_t code = F8::from_float_saturate(v * s);
      if (out) out[r * cols + c] = code;
      tile[i][threadIdx.x] = code;
    }
  }
  if (out_t) {
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;  // out_t [cols, rows]: row c, column r
      if (c < cols && r < rows) out_t[c * rows + r] = tile[threadIdx.x][i];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, o));
  // Non-negative floats order as their bits: an unsigned max is a float max.
  if (threadIdx.x == 0 && local > 0.0f) atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(local));
}

void fp8_cast_transpose_cuda(const Tensor& x, const Tensor& scale, const Tensor& out, const Tensor& out_t,
                             const Tensor& amax) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0 || cols == 0) return;
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  HG_CHECK(row_tiles <= INT32_MAX && col_tiles <= 65535, "fp8_cast_transpose",
           "[{}, {}] is too large for one launch (at most 65535 * 32 columns)", rows, cols);
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(col_tiles));
  const dim3 block(kTile, kTileRows);
  auto* o = out.defined() ? static_cast<uint8_t*>(out.raw_data()) : nullptr;
  auto* ot = out_t.defined() ? static_cast<uint8_t*>(out_t.raw_data()) : nullptr;
  const Dtype f8 = out.defined() ? out.dtype() : out_t.dtype();
  auto launch = [&]<class T>(const T* xp) {
    const auto* sp = static_cast<const float*>(scale.raw_data());
    auto* ap = static_cast<float*>(amax.raw_data());
    if (f8 == kFloat8E4M3) {
      fp8_cast_transpose_kernel<T, Float8E4M3><<<grid, block, 0, current_stream(dev)>>>(xp, rows, cols, sp, o, ot, ap);
    } else {
      fp8_cast_transpose_kernel<T, Float8E5M2><<<grid, block, 0, current_stream(dev)>>>(xp, rows, cols, sp, o, ot, ap);
    }
    HG_CUDA_CHECK_LAUNCH();
  };
  switch (x.dtype()) {
    case kFloat32: launch(static_cast<const float*>(x.raw_data())); break;
    case kBFloat16: launch(static_cast<const BFloat16*>(x.raw_data())); break;
    case kFloat16: launch(static_cast<const Half*>(x.raw_data())); break;
    default: fail("fp8_cast_transpose", "expected a float32, bfloat16 or float16 input, got {}", x.dtype());
  }
}

}  // namespace

HG_REGISTER_KERNEL(fp8_cast_transpose_stub, kCUDA, fp8_cast_transpose_cuda);

}  // namespace hg::cuda
