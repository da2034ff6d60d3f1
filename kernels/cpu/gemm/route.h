// The one place that picks a CPU matrix product's path: route() takes the product's shape,
// layout and dtype, who asks (a plain product, a widened one, a kernel's inner product) and the
// CPU's capabilities, and names the kernel that runs it. Every threshold it applies is in
// kGemmThresholds below, with the measurement that set it. HG_CPU_GEMM=<path> forces a path for
// A/B runs wherever that path can take the product.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "framework/dtype.h"
#include "kernels/cpu/cpu_caps.h"

namespace hg::cpu {

enum class GemmPath {
  Narrow,            // few rows against a large b read in place (kernels/cpu/gemm/narrow.h)
  NarrowTransposed,  // the mirror: a large a against few columns of b, on the same kernel
  ShortInner,        // 16-bit with a short inner dimension, bound by writing the result (short_inner.h)
  OneDnn,            // oneDNN: float32 sgemm or matmul primitive, bfloat16 on the CPU's bf16 units (onednn.h)
  Packed,            // 16-bit widened while packed, AVX-512 float32 kernel (packed.h)
  Widening,          // 16-bit widened a panel at a time onto the float32 library product (widening.h)
  Blas,              // OpenBLAS split over halfgrad's pool (blas.h)
  DenseBlas,         // float32 in a layout BLAS cannot read: copied dense, then a library product
};

// Who asks: the product an op computes (mm, linear), a 16-bit product whose result is wanted
// widened to float32 (gemm_widened_stub: a weight gradient under autocast), or a float32/float64
// product inside another kernel (convolution's im2col products, the widening path's panels),
// for which only the library paths (OneDnn, Blas) exist.
enum class GemmCaller { Product, Widened, Kernel };

// [m, k] @ [k, n] with a[i, p] at a + i * sa_row + p * sa_col and b[p, j] at b + p * sb_row +
// j * sb_col (element strides).
struct GemmProblem {
  int64_t m = 0, k = 0, n = 0;
  int64_t sa_row = 0, sa_col = 1, sb_row = 0, sb_col = 1;
  Dtype dtype = kFloat32;
  GemmCaller caller = GemmCaller::Product;
  bool accumulate = false;  // out += a @ b (Kernel callers)
};

// Every size at which route() changes path. Where the figure came from is in docs/history
// (PERF-CPU.md and PERF-CPU-HISTORY.md, by date).
struct GemmThresholds {
  // narrow: at most this many rows of a (a linear layer at a small batch)...
  int64_t narrow_rows = 16;
  // ...against a b of at least this many values: below it the library kernels' packing is cheap
  // enough (the 16 x 4096 x 4096 forward went from 4.3 to 3.0 ms in float32 on the AMX machine,
  // 2026-11-24; smaller weights were even).
  int64_t narrow_min_weights = int64_t{1} << 20;
  // A 16-bit product that would be widened first pays from a smaller b: reading it in place saves
  // the widening pass too (the MNIST MLP's 784 x 128 layers at batch 16-128, bf16 on the Intel
  // without AVX512_BF16 and f16 everywhere).
  int64_t narrow_min_weights_widened = int64_t{1} << 15;
  // and n >= 64, k >= 16: the kernel's column blocks and its dot products' pairs of k.
  int64_t narrow_min_cols = 64, narrow_min_depth = 16;
  // float32 x @ W^T with at most this many columns and this deep an inner dimension on the
  // transposed dot path: oneDNN's sgemm (and OpenBLAS's) is slow on so few columns, while with
  // 16 columns, or k = 256 and less, it was as fast or faster (Zen 4, 2026-11-26 17:25).
  int64_t narrow_float_cols = 12, narrow_float_min_depth = 512;
  // short_inner: 16-bit products at most this deep, with at least this many outputs (a weight
  // gradient at a small batch; oneDNN's bf16 kernels repack per block, 2026-11-24).
  int64_t short_inner_depth = 32;
  int64_t short_inner_min_outputs = int64_t{1} << 16;
  // Below this many multiply-adds oneDNN's bookkeeping costs more than OpenBLAS's small-matrix
  // kernels take, and each new shape would cost a plan (about a millisecond).
  int64_t onednn_min_work = int64_t{1} << 16;
  // float32 x @ W^T (b stored by columns, a by rows, k >= this) on oneDNN's matmul primitive
  // (brgemm) instead of its sgemm, for parts of at least brgemm_min_part_work multiply-adds, on
  // AVX-512: the MNIST CNN's fc1 forward 2.20-2.28 -> 1.57-1.59 ms on the Zen 4 (2026-11-27 03:45).
  int64_t brgemm_min_depth = 256;
  int64_t brgemm_min_part_work = int64_t{1} << 22;
  // Widening (no AVX-512): operands of at most this many elements together are widened whole and
  // multiplied by one float32 call; per-tile calls cost a char transformer's small float16
  // products about 4% of its step.
  int64_t widening_whole_operands = int64_t{1} << 20;
  // OpenBLAS products are split over the pool in parts of at least this many multiply-adds.
  int64_t blas_min_part_work = int64_t{1} << 18;
};
inline constexpr GemmThresholds kGemmThresholds{};

// The path of p on a CPU with these capabilities, or `forced` where that path can take p.
GemmPath route(const GemmProblem& p, const CpuCaps& caps, std::optional<GemmPath> forced = std::nullopt);

// The path of p on this machine: cpu_caps() and HG_CPU_GEMM.
GemmPath route(const GemmProblem& p);

// Where a product routed to OneDnn goes when oneDNN declines it while planning (it had only a
// reference kernel for the shape): OpenBLAS for float32, the widening paths for bfloat16.
GemmPath onednn_fallback(const GemmProblem& p, const CpuCaps& caps);

// Whether `path` can compute p at all (its kernel's dtypes and layouts), whatever it costs.
bool path_can_take(GemmPath path, const GemmProblem& p, const CpuCaps& caps);

// Whether the 16-bit dtype's products widen their operands to float32 on this CPU (float16
// always; bfloat16 without bfloat16 units or with oneDNN off).
bool product_widens(Dtype dtype, const CpuCaps& caps);

// Whether narrow's bfloat16 products run on the bfloat16 dot-product instruction.
inline bool narrow_bf16_dots(const CpuCaps& caps) { return caps.avx512_bf16 && !caps.native_off; }

// The path's name as HG_CPU_GEMM spells it ("narrow", "onednn", ...).
std::string_view path_name(GemmPath path);

// The path named s; throws hg::Error naming HG_CPU_GEMM and the valid names otherwise.
GemmPath parse_gemm_path(std::string_view s);

// HG_CPU_GEMM's path, read once; nullopt when unset or empty.
std::optional<GemmPath> forced_gemm_path();

// One line on which path typical products take here (benchmarks print it: development and CI
// machines differ).
std::string describe_routes(const CpuCaps& caps, std::optional<GemmPath> forced = std::nullopt);

}  // namespace hg::cpu
