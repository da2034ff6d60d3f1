// CUDA elementwise binary arithmetic and comparisons (scalar maths from kernels/common).
#include "framework/dispatch.h"
#include "framework/ops/binary_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T>
struct ArithFn {
  BinaryOp op;
  acc_t<T> alpha;
  __device__ __forceinline__ T operator()(T x, T y) const {
    return from_acc<T>(scalar::binary<acc_t<T>>(op, to_acc(x), to_acc(y), alpha));
  }
};

template <class T>
struct CompareFn {
  BinaryOp op;
  __device__ __forceinline__ bool operator()(T x, T y) const {
    return scalar::compare<acc_t<T>>(op, to_acc(x), to_acc(y));
  }
};

// bool tensors: maximum is "or", minimum is "and" (as the CPU kernel).
struct BoolFn {
  BinaryOp op;
  __device__ __forceinline__ bool operator()(bool x, bool y) const {
    return op == BinaryOp::Maximum ? (x || y) : (x && y);
  }
};

void binary_cuda(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  HG_CHECK(out.device() == a.device() && out.device() == b.device(), "binary",
           "expected tensors on one device, got {}, {} and {}", out.device(), a.device(), b.device());
  dispatch_dtype(a.dtype(), [&]<class T>(TypeTag<T>) {
    if (op >= BinaryOp::Eq) {
      launch_binary<bool, T>(out, a, b, CompareFn<T>{op}, "binary");
      return;
    }
    if constexpr (std::is_same_v<T, bool>) {
      launch_binary<bool, bool>(out, a, b, BoolFn{op}, "binary");
    } else {
      launch_binary<T, T>(out, a, b, ArithFn<T>{op, static_cast<acc_t<T>>(alpha)}, "binary");
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(binary_stub, kCUDA, binary_cuda);

}  // namespace hg::cuda
