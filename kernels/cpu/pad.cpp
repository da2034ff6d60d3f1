// CPU reflect/replicate/circular pad: the forward gathers a row of the output at a time (the
// source row found once per row); the backward sums each plane's output gradient into a float32
// (float64) buffer, then rounds it once into grad_in, planes split across threads.
#include <vector>

#include "framework/ops/pad_kernels.h"
#include "kernels/common/pad_index.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

// Along each dim, after = out - in - before.
int64_t pad_after(const PadGeometry& g, int d) { return g.out[d] - g.in[d] - g.before[d]; }

void pad_cpu(const Tensor& out, const Tensor& in, const PadGeometry& g) {
  dispatch_floating(in.dtype(), "pad", [&]<class T>(TypeTag<T>) {
    const T* x = static_cast<const T*>(in.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    const int64_t rows = out.size(0) * g.out[0] * g.out[1], in_plane = g.in[0] * g.in[1] * g.in[2];
    // The innermost dim's source indices are the same for every row.
    std::vector<int64_t> src2(static_cast<size_t>(g.out[2]));
    for (int64_t o = 0; o < g.out[2]; ++o)
      src2[static_cast<size_t>(o)] = padding::source(o, g.in[2], g.before[2], pad_after(g, 2), g.mode);
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(g.out[2], 1));
    parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o1 = r % g.out[1], o0 = (r / g.out[1]) % g.out[0], b = r / (g.out[1] * g.out[0]);
        const int64_t i0 = padding::source(o0, g.in[0], g.before[0], pad_after(g, 0), g.mode);
        const int64_t i1 = padding::source(o1, g.in[1], g.before[1], pad_after(g, 1), g.mode);
        const T* xr = x + b * in_plane + (i0 * g.in[1] + i1) * g.in[2];
        T* yr = y + r * g.out[2];
        for (int64_t o = 0; o < g.out[2]; ++o) yr[o] = xr[src2[static_cast<size_t>(o)]];
      }
    });
  });
}

void pad_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const PadGeometry& g) {
  dispatch_floating(grad_out.dtype(), "pad", [&]<class T>(TypeTag<T>) {
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* gy = static_cast<const T*>(grad_out.raw_data());
    T* gx = static_cast<T*>(grad_in.raw_data());
    const int64_t planes = grad_in.size(0), in_plane = g.in[0] * g.in[1] * g.in[2],
                  out_plane = g.out[0] * g.out[1] * g.out[2];
    std::vector<int64_t> src(static_cast<size_t>(out_plane));
    for (int64_t o = 0; o < out_plane; ++o) src[static_cast<size_t>(o)] = padding::source_offset(o, g);
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(out_plane, 1));
    parallel_for(planes, grain, [&](int64_t begin, int64_t end) {
      std::vector<Acc> acc(static_cast<size_t>(in_plane));
      for (int64_t p = begin; p < end; ++p) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        const T* gp = gy + p * out_plane;
        for (int64_t o = 0; o < out_plane; ++o)
          acc[static_cast<size_t>(src[static_cast<size_t>(o)])] += static_cast<Acc>(static_cast<acc_t<T>>(gp[o]));
        T* xp = gx + p * in_plane;
        for (int64_t i = 0; i < in_plane; ++i)
          xp[i] = static_cast<T>(static_cast<acc_t<T>>(acc[static_cast<size_t>(i)]));
      }
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(pad_stub, kCPU, pad_cpu);
HG_REGISTER_KERNEL(pad_backward_stub, kCPU, pad_backward_cpu);

}  // namespace hg::cpu
