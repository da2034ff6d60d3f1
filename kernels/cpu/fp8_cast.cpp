// The fused fp8 cast of an fp8 GEMM's operand on the CPU: saturating scaled cast, the transposed
// copy and the amax in one pass. The reference for the CUDA kernel (kernels/cuda/fp8_cast.cu):
// the same element rule (framework/float8.h), so both give the same codes and the same amax.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "framework/float8.h"
#include "framework/ops/fp8_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

// Non-negative floats (and +inf) order as their bits do.
uint32_t magnitude_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b & 0x7fffffffu;
}

template <class T, class F8>
void cast_transpose_typed(const T* x, int64_t rows, int64_t cols, float scale, F8* out, F8* out_t, float* amax) {
  std::atomic<uint32_t> best{magnitude_bits(*amax)};
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    uint32_t local = 0;
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = static_cast<float>(x[r * cols + c]);
        if (v == v) local = std::max(local, magnitude_bits(v));  // NaN skipped, as record_amax
        const F8 code = cast_to_float8_saturated<F8>(v, scale);
        if (out) out[r * cols + c] = code;
        if (out_t) out_t[c * rows + r] = code;
      }
    }
    uint32_t seen = best.load();
    while (local > seen && !best.compare_exchange_weak(seen, local)) {
    }
  });
  const uint32_t b = best.load();
  std::memcpy(amax, &b, 4);
}

void fp8_cast_transpose_cpu(const Tensor& x, const Tensor& scale, const Tensor& out, const Tensor& out_t,
                            const Tensor& amax) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const float s = *static_cast<const float*>(scale.raw_data());
  auto* a = static_cast<float*>(amax.raw_data());
  const Dtype f8 = out.defined() ? out.dtype() : out_t.dtype();
  auto run = [&]<class T>(const T* xp) {
    if (f8 == kFloat8E4M3) {
      cast_transpose_typed(xp, rows, cols, s, out.defined() ? static_cast<Float8E4M3*>(out.raw_data()) : nullptr,
                           out_t.defined() ? static_cast<Float8E4M3*>(out_t.raw_data()) : nullptr, a);
    } else {
      cast_transpose_typed(xp, rows, cols, s, out.defined() ? static_cast<Float8E5M2*>(out.raw_data()) : nullptr,
                           out_t.defined() ? static_cast<Float8E5M2*>(out_t.raw_data()) : nullptr, a);
    }
  };
  switch (x.dtype()) {
    case kFloat32: run(static_cast<const float*>(x.raw_data())); break;
    case kBFloat16: run(static_cast<const BFloat16*>(x.raw_data())); break;
    case kFloat16: run(static_cast<const Half*>(x.raw_data())); break;
    default: fail("fp8_cast_transpose", "expected a float32, bfloat16 or float16 input, got {}", x.dtype());
  }
}

}  // namespace

HG_REGISTER_KERNEL(fp8_cast_transpose_stub, kCPU, fp8_cast_transpose_cpu);

}  // namespace hg::cpu
