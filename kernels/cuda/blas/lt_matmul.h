// One cuBLASLt wrapper for every GEMM of the CUDA backend, in row-major terms: D = act(A B + bias)
// for batched [m, k] x [k, n] operands given by strides (transposed views need no copy), with
// the epilogue fused into the GEMM. Descriptors and the chosen algorithm are cached per
// problem; the workspace is one buffer per stream. fp8 operands (compute capability 8.9+) take
// their own types, device scales and the "TN" layout (see GemmProblem). No CUDA headers here.
#pragma once

#include <cstdint>
#include <optional>

#include "framework/dtype.h"

namespace hg::cuda::blas {

enum class Epilogue : uint8_t {
  None,
  Bias,      // D = A B + bias[n]
  Relu,      // D = relu(A B)
  BiasRelu,  // D = relu(A B + bias[n])
  Gelu,      // D = gelu_tanh(A B)  (cuBLASLt's GELU is the tanh approximation)
  BiasGelu,  // D = gelu_tanh(A B + bias[n])
  // D = A B and bias_grad = the sum over k of A's rows, length m (linear's bias gradient when
  // A is dY^T in dW = dY^T X).
  BiasGradA,
  // D = A B and bias_grad = the sum over k of B's columns, length n.
  BiasGradB,
  // D = gelu_tanh(A B + bias[n]) and aux = A B + bias (the GELU's input, kept for backward).
  GeluAuxBias,
  // D = gelu_tanh'(aux) * (A B) and bias_grad[n] = the sum of D's column n (the GELU's and its
  // linear's bias gradients on the GEMM that makes the GELU's incoming gradient).
  DGeluBGrad,
};

// A row-major [rows, cols] operand as strides in elements; one stride of the two must be 1
// (the other at least the matching extent) so it maps onto a cuBLASLt layout and an op flag.
struct MatrixArg {
  const void* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
  int64_t batch_stride = 0;
};

struct GemmProblem {
  // Of D, C and the bias, and of A and B unless a_dtype/b_dtype say otherwise (float32, float16,
  // bfloat16, float64; an fp8 D needs fp8 A and B).
  Dtype dtype = kFloat32;
  // fp8 operands (kFloat8E4M3, kFloat8E5M2; not both E5M2, see lt_matmul.cu): then A must be
  // K-major (unit column stride) and B given as the transpose of a K-major [n, k] matrix (unit row
  // stride), i.e. cuBLASLt's "TN", the one fp8 layout Hopper runs; k and both leading dimensions
  // multiples of 16; float32 accumulation; no epilogue; the device of compute capability 8.9+.
  std::optional<Dtype> a_dtype, b_dtype;
  int device = 0;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  MatrixArg a;        // [m, k]
  MatrixArg b;        // [k, n]
  void* d = nullptr;  // [m, n] with row stride ldd, unit column stride
  int64_t ldd = 0;
  int64_t d_batch_stride = 0;
  Epilogue epilogue = Epilogue::None;
  const void* bias = nullptr;  // Bias* epilogues
  void* bias_grad = nullptr;   // BiasGrad* and DGeluBGrad epilogues
  void* aux = nullptr;         // GeluAuxBias (written) and DGeluBGrad (read): [m, n], row stride aux_ld
  int64_t aux_ld = 0;          // a multiple of 8 elements (cuBLASLt's rule)
  // fp8 only, device pointers to one float each (null: 1). D = d_scale * (a_scale * b_scale * A B):
  // a_scale and b_scale are the operands' descales; d_scale and amax_d (set to max |A B| after the
  // operand scales, before d_scale) are for an fp8 D.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  const float* d_scale = nullptr;
  float* amax_d = nullptr;
  bool fast_accum = false;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM: fewer promotions of partial sums
};

// Whether `device` runs fp8 GEMMs (compute capability 8.9 or later: Ada, Hopper and newer).
bool lt_fp8_supported(int device);

// Whether a [rows, cols] operand with these strides maps onto cuBLASLt without a copy.
bool lt_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

// Queues the GEMM on the device's current stream. Throws hg::Error when cuBLASLt has no
// algorithm for the problem (naming it) or a call fails.
void lt_matmul(const GemmProblem& p);

// Cache statistics, for tests: how many distinct problems have a plan, and how many lookups
// found one.
struct LtCacheStats {
  int64_t plans = 0;
  int64_t hits = 0;
};
LtCacheStats lt_cache_stats();

}  // namespace hg::cuda::blas
