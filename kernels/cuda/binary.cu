// CUDA elementwise binary arithmetic and comparisons: one kernel per op, specialised on the
// op's functor from kernels/common (16-bit floats computed in float).
#include "framework/dispatch.h"
#include "framework/ops/binary_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T, class F>
struct ArithMap {
  F f;
  __device__ __forceinline__ T operator()(T x, T y) const { return from_acc<T>(f(to_acc(x), to_acc(y))); }
};

template <class T, class F>
struct CompareMap {
  F f;
  __device__ __forceinline__ bool operator()(T x, T y) const { return f(to_acc(x), to_acc(y)); }
};

void binary_cuda(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  HG_CHECK(out.device() == a.device() && out.device() == b.device(), "binary",
           "expected tensors on one device, got {}, {} and {}", out.device(), a.device(), b.device());
  dispatch_dtype(a.dtype(), [&]<class T>(TypeTag<T>) {
    if (op >= BinaryOp::Eq) {
      scalar::dispatch_compare(
          op, [&]<class F>(scalar::OpTag<F>) { launch_binary<bool, T>(out, a, b, CompareMap<T, F>{F{}}, "binary"); });
    } else if constexpr (std::is_same_v<T, bool>) {
      // bool tensors: maximum is "or", minimum is "and" (as the CPU kernel).
      if (op == BinaryOp::Maximum) {
        launch_binary<bool, bool>(out, a, b, scalar::Or{}, "binary");
      } else {
        launch_binary<bool, bool>(out, a, b, scalar::And{}, "binary");
      }
    } else {
      scalar::dispatch_arith(op, [&]<class F>(scalar::OpTag<F>) {
        launch_binary<T, T>(out, a, b, ArithMap<T, F>{scalar::make_binary<F>(alpha)}, "binary");
      });
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(binary_stub, kCUDA, binary_cuda);

}  // namespace hg::cuda
