// CPU kernels for the unary and binary elementwise ops. Each call switches on the op once
// (scalar::dispatch_*) and runs a loop specialised for that op's functor, spread over the
// thread pool by for_each_run. float32, float16 and bfloat16 compute in float32 vectors
// (vec_math.h: SLEEF for the transcendentals); other types run the scalar functor.
#include "framework/ops/binary_kernels.h"
#include "framework/ops/unary_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/vec_math.h"

namespace hg::cpu {
namespace {

template <class T>
inline constexpr bool is_float_compute = std::is_same_v<acc_t<T>, float>;  // float, Half, BFloat16

template <class T, class F>
void arith(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if constexpr (is_float_compute<T> && !std::is_same_v<T, float>) {
    binary_widened_loop<T, T>(out, a, b, f);
  } else {
    constexpr bool is_add = std::is_same_v<F, scalar::Add>;
    if constexpr (is_add || std::is_same_v<F, scalar::Sub>) {
      // a + b and a - b, the form nearly every call has (alpha 1): the same bits as the functor's
      // a + alpha * b, without the multiply-add. On a Zen 4 a float32 add whose output is
      // streamed (4M elements) took 1.24 ms as a multiply-add and 0.92 as an add, as long as mul.
      if (f.alpha == 1) {
        binary_loop<T, T, T>(out, a, b, [](T x, T y) { return static_cast<T>(is_add ? x + y : x - y); });
        return;
      }
    }
    binary_loop<T, T, T>(out, a, b, [f](T x, T y) { return f(x, y); });
  }
}

template <class T, class F>
void compare(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if constexpr (is_float_compute<T> && !std::is_same_v<T, float>) {
    binary_widened_loop<bool, T>(out, a, b, f);
  } else {
    binary_loop<bool, T, T>(out, a, b, [f](T x, T y) { return f(x, y); });
  }
}

void binary_cpu(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  dispatch_dtype(a.dtype(), [&]<class T>(TypeTag<T>) {
    if (op >= BinaryOp::Eq) {
      scalar::dispatch_compare(op, [&]<class F>(scalar::OpTag<F>) { compare<T>(out, a, b, F{}); });
    } else if constexpr (std::is_same_v<T, bool>) {
      if (op == BinaryOp::Maximum) {
        binary_loop<bool, bool, bool>(out, a, b, scalar::Or{});
      } else {
        binary_loop<bool, bool, bool>(out, a, b, scalar::And{});
      }
    } else {
      scalar::dispatch_arith(op,
                             [&]<class F>(scalar::OpTag<F>) { arith<T>(out, a, b, scalar::make_binary<F>(alpha)); });
    }
  });
}

// The maps cheap enough per element that memory bounds them on tensors past the last-level
// cache, where streaming stores pay (stream_store.h); only these stream. Every other map
// (transcendentals, sqrt, rsqrt) is bound by its arithmetic, which hides the read a plain store
// makes first, while streaming's extra pass through an L1 block costs core time: on a Zen 4,
// 4M float32, one thread, alternating, rsqrt 1.26 -> 1.15 ms, exp 1.40 -> 1.19, sqrt 0.86 -> 0.76
// with plain stores, while neg and reciprocal gain 25-40% streamed.
template <class F>
inline constexpr bool memory_bound_map = std::is_same_v<F, scalar::Neg> || std::is_same_v<F, scalar::Abs> ||
                                         std::is_same_v<F, scalar::Relu> || std::is_same_v<F, scalar::Reciprocal> ||
                                         std::is_same_v<F, scalar::LeakyRelu> || std::is_same_v<F, scalar::Hardswish>;

template <class T, class F>
void unary_typed(const Tensor& out, const Tensor& in, const F& f) {
  if constexpr (is_float_compute<T> && !std::is_same_v<T, float> && std::is_same_v<F, scalar::Rsqrt>) {
    // an estimate and one Newton step: as cheap as a division
    unary_map_loop<T>(out, in, [](const float* x, float* y, int64_t n) { map_rsqrt_for_16bit(x, y, n); });
  } else if constexpr (std::is_same_v<T, BFloat16> && kBf16InRegisters && !has_vec_op<F>) {
    unary_loop<T, T>(out, in, [&f](T x) { return T(f(static_cast<float>(x))); });  // see kBf16InRegisters
  } else if constexpr (is_float_compute<T>) {
    unary_map_loop<T>(
        out, in, [&f](const float* x, float* y, int64_t n) { map_unary(f, x, y, n); }, memory_bound_map<F>);
  } else if constexpr (std::is_integral_v<T>) {
    // The op layer sends integers only to the ops that keep them (neg, abs, relu).
    if constexpr (scalar::keeps_integers<F>) {
      unary_loop<T, T>(out, in, f);
    } else {
      fail("unary", "got an integer tensor of dtype {}", dtype_of<T>);
    }
  } else {
    unary_loop<T, T>(out, in, f);
  }
}

void unary_cpu(UnaryOp op, const Tensor& out, const Tensor& in, double p0, double p1) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      fail("unary", "not supported on bool tensors");
    } else {
      scalar::dispatch_unary(
          op, [&]<class F>(scalar::OpTag<F>) { unary_typed<T>(out, in, scalar::make_unary<F>(p0, p1)); });
    }
  });
}

// The product with the 0/1 mask (loops.h's relu_gradient_of).
void relu_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const Tensor& y) {
  dispatch_dtype(grad_out.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (std::is_same_v<T, bool>) {
      fail("relu", "not supported on bool tensors");
    } else {
      using Acc = acc_t<T>;
      const auto mask = [](Acc g, Acc v) { return relu_gradient_of(g, v); };
      if constexpr (is_float_compute<T> && !std::is_same_v<T, float>) {
        binary_widened_loop<T, T>(grad_in, grad_out, y, mask);  // widened a block at a time, not per element
      } else {
        binary_loop<T, T, T>(grad_in, grad_out, y, [mask](T g, T v) { return T(mask(Acc(g), Acc(v))); });
      }
    }
  });
}

// g * gelu'(x) in one pass: 16-bit and float32 inputs through the vector form (vec_math.h),
// float64 through the scalar functor.
void gelu_backward_cpu(const Tensor& grad_in, const Tensor& grad_out, const Tensor& x, bool approx) {
  dispatch_floating(grad_out.dtype(), "gelu", [&]<class T>(TypeTag<T>) {
    const auto run = [&](auto f) {
      if constexpr (is_float_compute<T>) {
        binary_widened_map_loop<T, T>(grad_in, grad_out, x, [&f](const float* g, const float* v, float* z, int64_t m) {
          map_binary(f, g, v, z, m);
        });
      } else {
        binary_loop<T, T, T>(grad_in, grad_out, x, f);
      }
    };
    if (approx) {
      run(scalar::GeluTanhBackward{});
    } else {
      run(scalar::GeluBackward{});
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(binary_stub, kCPU, binary_cpu);
HG_REGISTER_KERNEL(unary_stub, kCPU, unary_cpu);
HG_REGISTER_KERNEL(relu_backward_stub, kCPU, relu_backward_cpu);
HG_REGISTER_KERNEL(gelu_backward_stub, kCPU, gelu_backward_cpu);

}  // namespace hg::cpu
