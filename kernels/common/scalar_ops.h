// Scalar maths written once for the CPU loops and the CUDA kernels. Arithmetic on 16-bit floats
// is done in float (acc_t), and results are rounded once when stored.
#pragma once

#include <cmath>

#include "framework/half.h"
#include "framework/ops/binary.h"
#include "framework/ops/unary.h"

namespace hg::scalar {

template <class T>
HG_HOST_DEVICE inline T binary(BinaryOp op, T a, T b, T alpha) {
  switch (op) {
    case BinaryOp::Add: return a + alpha * b;
    case BinaryOp::Sub: return a - alpha * b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Maximum: return (a != a || a > b) ? a : b;  // NaN propagates
    case BinaryOp::Minimum: return (a != a || a < b) ? a : b;
    default: return T(0);
  }
}

template <class T>
HG_HOST_DEVICE inline bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    default: return false;
  }
}

template <class T>
HG_HOST_DEVICE inline T sigmoid(T x) {
  // Split by sign so exp never overflows.
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

template <class T>
HG_HOST_DEVICE inline T unary(UnaryOp op, T x, T p0, T p1) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Log1p: return std::log1p(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return T(1) / std::sqrt(x);
    case UnaryOp::Reciprocal: return T(1) / x;
    case UnaryOp::Abs: return x < T(0) ? -x : x;
    case UnaryOp::Sigmoid: return sigmoid(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Relu: return x > T(0) ? x : (x != x ? x : T(0));
    case UnaryOp::Gelu: return x * T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    case UnaryOp::GeluTanh: {
      const T k = T(0.79788456080286535588), c = T(0.044715);
      return T(0.5) * x * (T(1) + std::tanh(k * (x + c * x * x * x)));
    }
    case UnaryOp::Softplus: {
      const T bx = p0 * x;
      return bx > p1 ? x : std::log1p(std::exp(bx)) / p0;
    }
    case UnaryOp::PowScalar: return std::pow(x, p0);
    case UnaryOp::Erf: return std::erf(x);
  }
  return x;
}

}  // namespace hg::scalar
