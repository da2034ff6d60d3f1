// CUDA layer_norm and batch_norm, forward and backward. Statistics and sums in float32 for
// 16-bit and float32 data (float64 for float64); a block per row (layer_norm) or per channel
// (batch_norm), two passes for the variance as on the CPU. Channels-last batch_norm reduces each
// channel over the innermost dim with warps reading along C (no transposing copy). Weight/bias gradients of layer_norm
// are column sums over rows: a thread per column, or, with many rows, partial sums of row chunks
// added by column_sum. batch_norm with few channels splits each channel across blocks.
#include "framework/dispatch.h"
#include "framework/ops/creation.h"
#include "framework/ops/norm_kernels.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/column_sum.h"
#include "kernels/cuda/kernel_loop.cuh"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

constexpr int kNormThreads = 256;

// A per-feature parameter (weight, bias, running stats) read as A; `fallback` when absent.
template <class A>
struct Param {
  const void* p = nullptr;
  Dtype dtype = kFloat32;
  __device__ A get(int64_t i, A fallback) const {
    if (p == nullptr) return fallback;
    switch (dtype) {
      case kFloat16: return static_cast<A>(to_acc(static_cast<const Half*>(p)[i]));
      case kBFloat16: return static_cast<A>(to_acc(static_cast<const BFloat16*>(p)[i]));
      case kFloat64: return static_cast<A>(static_cast<const double*>(p)[i]);
      default: return static_cast<A>(static_cast<const float*>(p)[i]);
    }
  }
  __device__ void set(int64_t i, A v) const {
    switch (dtype) {
      case kFloat16: const_cast<Half*>(static_cast<const Half*>(p))[i] = from_acc<Half>(static_cast<float>(v)); break;
      case kBFloat16:
        const_cast<BFloat16*>(static_cast<const BFloat16*>(p))[i] = from_acc<BFloat16>(static_cast<float>(v));
        break;
      case kFloat64: const_cast<double*>(static_cast<const double*>(p))[i] = static_cast<double>(v); break;
      default: const_cast<float*>(static_cast<const float*>(p))[i] = static_cast<float>(v); break;
    }
  }
};
template <class A>
Param<A> param(const Tensor& t) {
  Param<A> p;
  if (t.defined()) p.p = t.raw_data(), p.dtype = t.dtype();
  return p;
}

template <class T>
__global__ void layer_norm_kernel(T* y, acc_t<T>* mean, acc_t<T>* rstd, const T* x, Param<acc_t<T>> w,
                                  Param<acc_t<T>> b, int64_t cols, double eps) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * cols;
  A s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += to_acc(xr[j]);
  const A m = block_sum(s, scratch) / static_cast<A>(cols);
  A ss = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A d = to_acc(xr[j]) - m;
    ss += d * d;
  }
  const A inv = static_cast<A>(1.0 / sqrt(static_cast<double>(block_sum(ss, scratch) / static_cast<A>(cols)) + eps));
  if (threadIdx.x == 0) mean[r] = m, rstd[r] = inv;
  T* yr = y + r * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    yr[j] = from_acc<T>((to_acc(xr[j]) - m) * inv * w.get(j, A(1)) + b.get(j, A(0)));
}

template <class T>
__global__ void layer_norm_backward_x_kernel(T* gx, const T* gy, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd,
                                             Param<acc_t<T>> w, int64_t cols) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t r = blockIdx.x;
  const T *xr = x + r * cols, *gr = gy + r * cols;
  const A m = mean[r], inv = rstd[r];
  A sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A g = to_acc(gr[j]) * w.get(j, A(1));
    sg += g;
    sgx += g * (to_acc(xr[j]) - m) * inv;
  }
  const A mg = block_sum(sg, scratch) / static_cast<A>(cols), mgx = block_sum(sgx, scratch) / static_cast<A>(cols);
  T* dx = gx + r * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A g = to_acc(gr[j]) * w.get(j, A(1));
    const A xh = (to_acc(xr[j]) - m) * inv;
    dx[j] = from_acc<T>(inv * (g - mg - xh * mgx));
  }
}

template <class T>
__global__ void layer_norm_backward_params_kernel(Param<acc_t<T>> gw, Param<acc_t<T>> gb, const T* gy, const T* x,
                                                  const acc_t<T>* mean, const acc_t<T>* rstd, int64_t rows,
                                                  int64_t cols) {
  using A = acc_t<T>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  A dw = 0, db = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const A g = to_acc(gy[r * cols + j]);
    dw += g * (to_acc(x[r * cols + j]) - mean[r]) * rstd[r];
    db += g;
  }
  if (gw.p) gw.set(j, dw);
  if (gb.p) gb.set(j, db);
}

// The same sums for many rows: a block is 32 columns by kPartialRows threads walking one chunk of
// rows (blockIdx.y); it writes its sums to partial_w/partial_b [gridDim.y, cols] (accumulation
// type), which column_sum then adds. One thread per column over every row would leave most SMs
// idle (cols = 1024 is 4 blocks).
constexpr int kPartialRows = 8;

template <class T>
__global__ void layer_norm_param_partials_kernel(acc_t<T>* partial_w, acc_t<T>* partial_b, const T* gy, const T* x,
                                                 const acc_t<T>* mean, const acc_t<T>* rstd, int64_t rows, int64_t cols,
                                                 int64_t chunk) {
  using A = acc_t<T>;
  __shared__ A tile_w[kPartialRows][33], tile_b[kPartialRows][33];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  A dw = 0, db = 0;
  if (j < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kPartialRows) {
      const A g = to_acc(gy[r * cols + j]);
      dw += g * (to_acc(x[r * cols + j]) - mean[r]) * rstd[r];
      db += g;
    }
  }
  tile_w[threadIdx.y][threadIdx.x] = dw;
  tile_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    for (int y = 1; y < kPartialRows; ++y) {
      dw += tile_w[y][threadIdx.x];
      db += tile_b[y][threadIdx.x];
    }
    const int64_t at = static_cast<int64_t>(blockIdx.y) * cols + j;
    partial_w[at] = dw;
    partial_b[at] = db;
  }
}

// One block per channel of x viewed as [N, C, S].
template <class T>
__global__ void batch_norm_kernel(T* y, Param<acc_t<T>> save_mean, Param<acc_t<T>> save_invstd, const T* x,
                                  Param<acc_t<T>> w, Param<acc_t<T>> b, Param<acc_t<T>> rm, Param<acc_t<T>> rv,
                                  int64_t n, int64_t c, int64_t s, bool training, double momentum, double eps) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t ch = blockIdx.x, count = n * s;
  A m, var;
  if (training) {
    A sum = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = threadIdx.x; j < s; j += blockDim.x) sum += to_acc(x[(i * c + ch) * s + j]);
    m = block_sum(sum, scratch) / static_cast<A>(count);
    A ss = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
        const A d = to_acc(x[(i * c + ch) * s + j]) - m;
        ss += d * d;
      }
    ss = block_sum(ss, scratch);
    var = ss / static_cast<A>(count);
    if (rm.p && threadIdx.x == 0) {
      rm.set(ch, static_cast<A>((1 - momentum) * rm.get(ch, A(0)) + momentum * m));
      rv.set(ch, static_cast<A>((1 - momentum) * rv.get(ch, A(1)) + momentum * ss / static_cast<A>(count - 1)));
    }
  } else {
    m = rm.get(ch, A(0)), var = rv.get(ch, A(1));
  }
  const double inv = 1.0 / sqrt(static_cast<double>(var) + eps);
  if (threadIdx.x == 0) save_mean.set(ch, m), save_invstd.set(ch, static_cast<A>(inv));
  const double wc = static_cast<double>(w.get(ch, A(1)));
  const A scale = static_cast<A>(inv * wc);
  const A shift = static_cast<A>(static_cast<double>(b.get(ch, A(0))) - static_cast<double>(m) * inv * wc);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
      const int64_t k = (i * c + ch) * s + j;
      y[k] = from_acc<T>(to_acc(x[k]) * scale + shift);
    }
}

template <class T>
__global__ void batch_norm_backward_kernel(T* gx, Param<acc_t<T>> gw, Param<acc_t<T>> gb, const T* gy, const T* x,
                                           Param<acc_t<T>> w, Param<acc_t<T>> save_mean, Param<acc_t<T>> save_invstd,
                                           int64_t n, int64_t c, int64_t s, bool training) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t ch = blockIdx.x, count = n * s;
  const A m = save_mean.get(ch, A(0)), inv = save_invstd.get(ch, A(1));
  A sg = 0, sgx = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
      const int64_t k = (i * c + ch) * s + j;
      const A g = to_acc(gy[k]);
      sg += g;
      sgx += g * (to_acc(x[k]) - m) * inv;
    }
  sg = block_sum(sg, scratch);
  sgx = block_sum(sgx, scratch);
  if (threadIdx.x == 0) {
    if (gw.p) gw.set(ch, sgx);
    if (gb.p) gb.set(ch, sg);
  }
  if (gx == nullptr) return;
  const A scale = w.get(ch, A(1)) * inv;
  const A mg = training ? sg / static_cast<A>(count) : A(0), mgx = training ? sgx / static_cast<A>(count) : A(0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
      const int64_t k = (i * c + ch) * s + j;
      const A xh = (to_acc(x[k]) - m) * inv;
      gx[k] = from_acc<T>(scale * (to_acc(gy[k]) - mg - xh * mgx));
    }
}

// batch_norm with few channels and many elements per channel: the N*S elements of a channel are
// cut into chunks across blocks (grid [splits, C]); per-chunk statistics are merged per channel
// (Chan's formula for the variance), then an elementwise pass applies the result. The element q
// of channel ch (q < N*S) is x[((q / S) * C + ch) * S + q % S].
__device__ __forceinline__ int64_t bn_index(int64_t q, int64_t ch, int64_t c, int64_t s) {
  return ((q / s) * c + ch) * s + q % s;
}

template <class T>
__global__ void bn_stats_partial_kernel(const T* x, int64_t c, int64_t s, int64_t count, int64_t chunk, acc_t<T>* pmean,
                                        acc_t<T>* pm2) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t ch = blockIdx.y, b = blockIdx.x, splits = gridDim.x;
  const int64_t q0 = b * chunk, q1 = q0 + chunk < count ? q0 + chunk : count;
  A sum = 0;
  for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) sum += to_acc(x[bn_index(q, ch, c, s)]);
  const A total = block_sum(sum, scratch);
  const A mb = q1 > q0 ? total / static_cast<A>(q1 - q0) : A(0);
  A ss = 0;
  for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
    const A d = to_acc(x[bn_index(q, ch, c, s)]) - mb;
    ss += d * d;
  }
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) pmean[ch * splits + b] = mb, pm2[ch * splits + b] = ss;
}

// One thread per channel: merged statistics, running stats, saved mean/invstd, and the affine
// coefficients y = x * scale + shift.
template <class T>
__global__ void bn_finalize_kernel(const acc_t<T>* pmean, const acc_t<T>* pm2, int64_t splits, int64_t chunk,
                                   int64_t count, int64_t c, Param<acc_t<T>> save_mean, Param<acc_t<T>> save_invstd,
                                   Param<acc_t<T>> w, Param<acc_t<T>> b, Param<acc_t<T>> rm, Param<acc_t<T>> rv,
                                   bool training, double momentum, double eps, acc_t<T>* scale, acc_t<T>* shift) {
  using A = acc_t<T>;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  A m, var;
  if (training) {
    double n_acc = 0, mean = 0, m2 = 0;
    for (int64_t k = 0; k < splits; ++k) {
      const int64_t left = count - k * chunk;
      const double nb = static_cast<double>(left < chunk ? left : chunk);
      const double mb = pmean[ch * splits + k], delta = mb - mean, nt = n_acc + nb;
      mean += delta * nb / nt;
      m2 += static_cast<double>(pm2[ch * splits + k]) + delta * delta * n_acc * nb / nt;
      n_acc = nt;
    }
    m = static_cast<A>(mean);
    var = static_cast<A>(m2 / static_cast<double>(count));
    if (rm.p) {
      rm.set(ch, static_cast<A>((1 - momentum) * rm.get(ch, A(0)) + momentum * m));
      rv.set(ch, static_cast<A>((1 - momentum) * rv.get(ch, A(1)) + momentum * m2 / static_cast<double>(count - 1)));
    }
  } else {
    m = rm.get(ch, A(0)), var = rv.get(ch, A(1));
  }
  const double inv = 1.0 / sqrt(static_cast<double>(var) + eps);
  save_mean.set(ch, m);
  save_invstd.set(ch, static_cast<A>(inv));
  const double wc = static_cast<double>(w.get(ch, A(1)));
  scale[ch] = static_cast<A>(inv * wc);
  shift[ch] = static_cast<A>(static_cast<double>(b.get(ch, A(0))) - static_cast<double>(m) * inv * wc);
}

// y = x * scale + shift per channel (the channel of element k is (k / s) % c: s = 1 for
// channels-last), then + residual[k] where given, then ReLU where asked (batch_norm_add_relu), in
// the accumulation type before the one rounding.
template <class T>
__global__ void bn_apply_kernel(T* y, const T* x, const acc_t<T>* scale, const acc_t<T>* shift, int64_t c, int64_t s,
                                int64_t total, const T* residual, bool relu) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(k, total) {
    const int64_t ch = (k / s) % c;
    A v = to_acc(x[k]) * scale[ch] + shift[ch];
    if (residual != nullptr) v += to_acc(residual[k]);
    if (relu) v = v > A(0) || v != v ? v : A(0);  // NaN stays NaN, as relu's functor
    y[k] = from_acc<T>(v);
  }
}

// Channels-last batch_norm: x viewed as [count = N*H*W rows, C]. A block of kNhwcRows x 32 threads
// takes 32 consecutive channels (each warp reads along C, coalesced) and a chunk of rows; its
// per-channel partials go where the NCHW split path's do ([ch * splits + b]), so the same
// finalize kernels merge them and the same apply kernels (with s = 1) finish.
constexpr int kNhwcChannels = 32, kNhwcRows = 8;

// The column sums of a kNhwcRows x 32 block: every thread gets its channel's total.
template <class A>
__device__ A column_sum_of_block(A v, A (&scratch)[kNhwcRows][kNhwcChannels]) {
  scratch[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  A total = 0;
#pragma unroll
  for (int r = 0; r < kNhwcRows; ++r) total += scratch[r][threadIdx.x];
  __syncthreads();
  return total;
}

template <class T>
__global__ void bn_stats_partial_nhwc_kernel(const T* x, int64_t c, int64_t count, int64_t chunk, acc_t<T>* pmean,
                                             acc_t<T>* pm2) {
  using A = acc_t<T>;
  __shared__ A scratch[kNhwcRows][kNhwcChannels];
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kNhwcChannels + threadIdx.x, b = blockIdx.y, splits = gridDim.y;
  const int64_t q0 = b * chunk, q1 = q0 + chunk < count ? q0 + chunk : count;
  const bool live = ch < c;
  A sum = 0;
  if (live)
    for (int64_t q = q0 + threadIdx.y; q < q1; q += kNhwcRows) sum += to_acc(x[q * c + ch]);
  const A mb =
      q1 > q0 ? column_sum_of_block(sum, scratch) / static_cast<A>(q1 - q0) : column_sum_of_block(A(0), scratch);
  A ss = 0;
  if (live) {
    for (int64_t q = q0 + threadIdx.y; q < q1; q += kNhwcRows) {
      const A d = to_acc(x[q * c + ch]) - mb;
      ss += d * d;
    }
  }
  ss = column_sum_of_block(ss, scratch);
  if (live && threadIdx.y == 0) pmean[ch * splits + b] = mb, pm2[ch * splits + b] = ss;
}

template <class T>
__global__ void bn_grad_partial_nhwc_kernel(const T* gy, const T* x, Param<acc_t<T>> save_mean,
                                            Param<acc_t<T>> save_invstd, int64_t c, int64_t count, int64_t chunk,
                                            acc_t<T>* psg, acc_t<T>* psgx) {
  using A = acc_t<T>;
  __shared__ A scratch[kNhwcRows][kNhwcChannels];
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kNhwcChannels + threadIdx.x, b = blockIdx.y, splits = gridDim.y;
  const int64_t q0 = b * chunk, q1 = q0 + chunk < count ? q0 + chunk : count;
  const bool live = ch < c;
  A sg = 0, sgx = 0;
  if (live) {
    const A m = save_mean.get(ch, A(0)), inv = save_invstd.get(ch, A(1));
    for (int64_t q = q0 + threadIdx.y; q < q1; q += kNhwcRows) {
      const A g = to_acc(gy[q * c + ch]);
      sg += g;
      sgx += g * (to_acc(x[q * c + ch]) - m) * inv;
    }
  }
  sg = column_sum_of_block(sg, scratch);
  sgx = column_sum_of_block(sgx, scratch);
  if (live && threadIdx.y == 0) psg[ch * splits + b] = sg, psgx[ch * splits + b] = sgx;
}

template <class T>
__global__ void bn_grad_partial_kernel(const T* gy, const T* x, Param<acc_t<T>> save_mean, Param<acc_t<T>> save_invstd,
                                       int64_t c, int64_t s, int64_t count, int64_t chunk, acc_t<T>* psg,
                                       acc_t<T>* psgx) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t ch = blockIdx.y, b = blockIdx.x, splits = gridDim.x;
  const int64_t q0 = b * chunk, q1 = q0 + chunk < count ? q0 + chunk : count;
  const A m = save_mean.get(ch, A(0)), inv = save_invstd.get(ch, A(1));
  A sg = 0, sgx = 0;
  for (int64_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
    const int64_t k = bn_index(q, ch, c, s);
    const A g = to_acc(gy[k]);
    sg += g;
    sgx += g * (to_acc(x[k]) - m) * inv;
  }
  sg = block_sum(sg, scratch);
  sgx = block_sum(sgx, scratch);
  if (threadIdx.x == 0) psg[ch * splits + b] = sg, psgx[ch * splits + b] = sgx;
}

// One thread per channel: the parameter gradients, and coef [3, C] = (w * invstd, mean of g,
// mean of g * xhat) for the input gradient.
template <class T>
__global__ void bn_grad_finalize_kernel(const acc_t<T>* psg, const acc_t<T>* psgx, int64_t splits, int64_t count,
                                        int64_t c, Param<acc_t<T>> gw, Param<acc_t<T>> gb, Param<acc_t<T>> w,
                                        Param<acc_t<T>> save_invstd, bool training, acc_t<T>* coef) {
  using A = acc_t<T>;
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  A sg = 0, sgx = 0;
  for (int64_t k = 0; k < splits; ++k) sg += psg[ch * splits + k], sgx += psgx[ch * splits + k];
  if (gw.p) gw.set(ch, sgx);
  if (gb.p) gb.set(ch, sg);
  coef[ch] = w.get(ch, A(1)) * save_invstd.get(ch, A(1));
  coef[c + ch] = training ? sg / static_cast<A>(count) : A(0);
  coef[2 * c + ch] = training ? sgx / static_cast<A>(count) : A(0);
}

template <class T>
__global__ void bn_grad_apply_kernel(T* gx, const T* gy, const T* x, Param<acc_t<T>> save_mean,
                                     Param<acc_t<T>> save_invstd, const acc_t<T>* coef, int64_t c, int64_t s,
                                     int64_t total) {
  using A = acc_t<T>;
  HG_KERNEL_LOOP(k, total) {
    const int64_t ch = (k / s) % c;
    const A xh = (to_acc(x[k]) - save_mean.get(ch, A(0))) * save_invstd.get(ch, A(1));
    gx[k] = from_acc<T>(coef[ch] * (to_acc(gy[k]) - coef[c + ch] - xh * coef[2 * c + ch]));
  }
}

// How many chunks to cut each channel into (1: keep one block per channel).
int64_t bn_splits(int64_t c, int64_t count, int dev) {
  const int64_t sms = device_properties(dev).multiProcessorCount;
  if (c >= 2 * sms || count < 8192) return 1;
  return std::clamp<int64_t>(std::min(sms * 4 / c, count / 4096), 1, 65535);
}

// How batch norm's forward and backward cut x [N, C, *] over the device: per channel, `used`
// chunks of `chunk` of the channel's `count` values, each chunk a block (see bn_splits).
struct BnSplit {
  int64_t n, c, s, count, chunk = 0, used = 0;
  bool split = false;  // false: one block per channel (the plain kernels)
  bool nhwc = false;   // x channels-last: [count, C] (always split)
};

// The partial-statistics launches of the split path, by layout.
template <class T>
void bn_stats_partials(const BnSplit& g, const T* x, acc_t<T>* pmean, acc_t<T>* pm2, cudaStream_t stream) {
  if (g.nhwc) {
    const dim3 grid(static_cast<unsigned>((g.c + kNhwcChannels - 1) / kNhwcChannels), static_cast<unsigned>(g.used));
    bn_stats_partial_nhwc_kernel<T>
        <<<grid, dim3(kNhwcChannels, kNhwcRows), 0, stream>>>(x, g.c, g.count, g.chunk, pmean, pm2);
  } else {
    bn_stats_partial_kernel<T>
        <<<dim3(static_cast<unsigned>(g.used), static_cast<unsigned>(g.c)), kNormThreads, 0, stream>>>(
            x, g.c, g.s, g.count, g.chunk, pmean, pm2);
  }
  HG_CUDA_CHECK_LAUNCH();
}

template <class T>
void bn_grad_partials(const BnSplit& g, const T* gy, const T* x, Param<acc_t<T>> sm, Param<acc_t<T>> si, acc_t<T>* psg,
                      acc_t<T>* psgx, cudaStream_t stream) {
  if (g.nhwc) {
    const dim3 grid(static_cast<unsigned>((g.c + kNhwcChannels - 1) / kNhwcChannels), static_cast<unsigned>(g.used));
    bn_grad_partial_nhwc_kernel<T>
        <<<grid, dim3(kNhwcChannels, kNhwcRows), 0, stream>>>(gy, x, sm, si, g.c, g.count, g.chunk, psg, psgx);
  } else {
    bn_grad_partial_kernel<T>
        <<<dim3(static_cast<unsigned>(g.used), static_cast<unsigned>(g.c)), kNormThreads, 0, stream>>>(
            gy, x, sm, si, g.c, g.s, g.count, g.chunk, psg, psgx);
  }
  HG_CUDA_CHECK_LAUNCH();
}

// `always`: the split path even where one block per channel would do (channels-last x, whose
// kernels are the split ones, and the fused residual add and ReLU, done in its apply pass).
BnSplit bn_split(const Tensor& x, int dev, bool always = false) {
  BnSplit g{x.size(0), x.size(1), 0, 0};
  g.s = g.n && g.c ? x.numel() / (g.n * g.c) : 0;
  g.count = g.n * g.s;
  g.nhwc = !x.is_contiguous();
  int64_t splits = g.c ? bn_splits(g.c, g.count, dev) : 1;
  if (g.nhwc) {  // blocks of 32 channels: enough row chunks to fill the device
    const int64_t tiles = (g.c + kNhwcChannels - 1) / kNhwcChannels;
    const int64_t sms = device_properties(dev).multiProcessorCount;
    splits = std::clamp<int64_t>(std::min(sms * 4 / std::max<int64_t>(tiles, 1), g.count / 256), 1, 65535);
  }
  HG_CHECK(!(always || g.nhwc) || g.c <= 65535, "batch_norm", "{} channels are too many for one launch", g.c);
  g.split = (splits > 1 || always || g.nhwc) && g.c <= 65535;
  if (g.split) {
    g.chunk = (g.count + splits - 1) / splits;
    g.used = (g.count + g.chunk - 1) / g.chunk;
  }
  return g;
}

unsigned blocks(int64_t n, const char* op) {
  HG_CHECK(n <= INT32_MAX, op, "{} rows/channels are too many for one launch", n);
  return static_cast<unsigned>(n);
}

void layer_norm_cuda(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, double eps) {
  const int64_t rows = mean.numel(), cols = rows ? x.numel() / rows : 0;
  if (rows == 0 || cols == 0) return;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    layer_norm_kernel<T><<<blocks(rows, "layer_norm"), kNormThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<A*>(mean.raw_data()), static_cast<A*>(rstd.raw_data()),
        static_cast<const T*>(x.raw_data()), param<A>(w), param<A>(b), cols, eps);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward_cuda(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                              const Tensor& mean, const Tensor& rstd, const Tensor& w) {
  const int64_t rows = mean.numel(), cols = rows ? x.numel() / rows : 0;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  dispatch_floating(x.dtype(), "layer_norm", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    if (gx.defined() && rows > 0 && cols > 0) {
      layer_norm_backward_x_kernel<T><<<blocks(rows, "layer_norm"), kNormThreads, 0, stream>>>(
          static_cast<T*>(gx.raw_data()), static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()),
          static_cast<const A*>(mean.raw_data()), static_cast<const A*>(rstd.raw_data()), param<A>(w), cols);
      HG_CUDA_CHECK_LAUNCH();
    }
    const int64_t col_blocks = (cols + 31) / 32;
    const int64_t splits =
        std::min<int64_t>({std::max<int64_t>(1, static_cast<int64_t>(device_properties(dev).multiProcessorCount) * 4 /
                                                    std::max<int64_t>(col_blocks, 1)),
                           rows / 32, 65535});
    const bool blocked = splits > 1 && col_blocks <= INT32_MAX && (!gw.defined() || gw.is_contiguous()) &&
                         (!gb.defined() || gb.is_contiguous());
    if ((gw.defined() || gb.defined()) && cols > 0 && blocked) {
      const Dtype acc_dtype = std::is_same_v<A, double> ? kFloat64 : kFloat32;
      const Tensor partial = empty({2, splits, cols}, TensorOptions(acc_dtype).device(x.device()));
      A* pw = static_cast<A*>(partial.raw_data());
      A* pb = pw + splits * cols;
      layer_norm_param_partials_kernel<T>
          <<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits)), dim3(32, kPartialRows), 0,
             stream>>>(pw, pb, static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()),
                       static_cast<const A*>(mean.raw_data()), static_cast<const A*>(rstd.raw_data()), rows, cols,
                       (rows + splits - 1) / splits);
      HG_CUDA_CHECK_LAUNCH();
      if (gw.defined()) column_sum(acc_dtype, pw, splits, cols, cols, 1, gw.dtype(), gw.raw_data(), dev);
      if (gb.defined()) column_sum(acc_dtype, pb, splits, cols, cols, 1, gb.dtype(), gb.raw_data(), dev);
    } else if ((gw.defined() || gb.defined()) && cols > 0) {
      layer_norm_backward_params_kernel<T>
          <<<blocks((cols + kNormThreads - 1) / kNormThreads, "layer_norm"), kNormThreads, 0, stream>>>(
              param<A>(gw), param<A>(gb), static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()),
              static_cast<const A*>(mean.raw_data()), static_cast<const A*>(rstd.raw_data()), rows, cols);
      HG_CUDA_CHECK_LAUNCH();
    }
  });
}

// batch_norm's forward, and, with `residual` or `relu`, batch_norm_add_relu's: relu(bn(x) + residual)
// in the apply pass.
void batch_norm_forward(const Tensor& out, const Tensor& sm, const Tensor& si, const Tensor& x, const Tensor& w,
                        const Tensor& b, const Tensor& rm, const Tensor& rv, bool training, double momentum, double eps,
                        const Tensor& residual, bool relu) {
  if (x.size(1) == 0) return;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const BnSplit g = bn_split(x, dev, residual.defined() || relu);
  const int64_t n = g.n, c = g.c, s = g.s, count = g.count, chunk = g.chunk, used = g.used;
  if (g.split) {
    cudaStream_t stream = current_stream(dev);
    dispatch_floating(x.dtype(), "batch_norm", [&]<class T>(TypeTag<T>) {
      using A = acc_t<T>;
      const Dtype acc_dtype = std::is_same_v<A, double> ? kFloat64 : kFloat32;
      // Freed at once: the caching allocator reuses the block only for later work on this stream.
      const Tensor tmp = empty({2 * c * used + 2 * c}, TensorOptions(acc_dtype).device(x.device()));
      A* pmean = static_cast<A*>(tmp.raw_data());
      A* pm2 = pmean + c * used;
      A* scale = pm2 + c * used;
      A* shift = scale + c;
      if (training) bn_stats_partials<T>(g, static_cast<const T*>(x.raw_data()), pmean, pm2, stream);
      bn_finalize_kernel<T><<<static_cast<unsigned>((c + 127) / 128), 128, 0, stream>>>(
          pmean, pm2, used, chunk, count, c, param<A>(sm), param<A>(si), param<A>(w), param<A>(b), param<A>(rm),
          param<A>(rv), training, momentum, eps, scale, shift);
      HG_CUDA_CHECK_LAUNCH();
      const int64_t total = x.numel();
      bn_apply_kernel<T><<<grid_for(total, kNormThreads, 1, dev), kNormThreads, 0, stream>>>(
          static_cast<T*>(out.raw_data()), static_cast<const T*>(x.raw_data()), scale, shift, c, g.nhwc ? 1 : s, total,
          residual.defined() ? static_cast<const T*>(residual.raw_data()) : nullptr, relu);
      HG_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  dispatch_floating(x.dtype(), "batch_norm", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    batch_norm_kernel<T><<<blocks(c, "batch_norm"), kNormThreads, 0, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), param<A>(sm), param<A>(si), static_cast<const T*>(x.raw_data()), param<A>(w),
        param<A>(b), param<A>(rm), param<A>(rv), n, c, s, training, momentum, eps);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void batch_norm_cuda(const Tensor& out, const Tensor& sm, const Tensor& si, const Tensor& x, const Tensor& w,
                     const Tensor& b, const Tensor& rm, const Tensor& rv, bool training, double momentum, double eps) {
  batch_norm_forward(out, sm, si, x, w, b, rm, rv, training, momentum, eps, Tensor(), false);
}

void batch_norm_add_relu_cuda(const Tensor& out, const Tensor& sm, const Tensor& si, const Tensor& x, const Tensor& w,
                              const Tensor& b, const Tensor& rm, const Tensor& rv, bool training, double momentum,
                              double eps, const Tensor& residual) {
  batch_norm_forward(out, sm, si, x, w, b, rm, rv, training, momentum, eps, residual, true);
}

void batch_norm_backward_cuda(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                              const Tensor& w, const Tensor& sm, const Tensor& si, bool training) {
  if (x.size(1) == 0) return;
  const int dev = x.device().index;
  DeviceGuard guard(dev);
  const BnSplit g = bn_split(x, dev);
  const int64_t n = g.n, c = g.c, s = g.s, count = g.count, used = g.used;
  if (g.split) {
    cudaStream_t stream = current_stream(dev);
    dispatch_floating(x.dtype(), "batch_norm", [&]<class T>(TypeTag<T>) {
      using A = acc_t<T>;
      const Dtype acc_dtype = std::is_same_v<A, double> ? kFloat64 : kFloat32;
      const Tensor tmp = empty({2 * c * used + 3 * c}, TensorOptions(acc_dtype).device(x.device()));
      A* psg = static_cast<A*>(tmp.raw_data());
      A* psgx = psg + c * used;
      A* coef = psgx + c * used;
      bn_grad_partials<T>(g, static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()), param<A>(sm),
                          param<A>(si), psg, psgx, stream);
      bn_grad_finalize_kernel<T><<<static_cast<unsigned>((c + 127) / 128), 128, 0, stream>>>(
          psg, psgx, used, count, c, param<A>(gw), param<A>(gb), param<A>(w), param<A>(si), training, coef);
      HG_CUDA_CHECK_LAUNCH();
      if (gx.defined()) {
        const int64_t total = x.numel();
        bn_grad_apply_kernel<T><<<grid_for(total, kNormThreads, 1, dev), kNormThreads, 0, stream>>>(
            static_cast<T*>(gx.raw_data()), static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()),
            param<A>(sm), param<A>(si), coef, c, g.nhwc ? 1 : s, total);
        HG_CUDA_CHECK_LAUNCH();
      }
    });
    return;
  }
  dispatch_floating(x.dtype(), "batch_norm", [&]<class T>(TypeTag<T>) {
    using A = acc_t<T>;
    batch_norm_backward_kernel<T><<<blocks(c, "batch_norm"), kNormThreads, 0, current_stream(dev)>>>(
        gx.defined() ? static_cast<T*>(gx.raw_data()) : nullptr, param<A>(gw), param<A>(gb),
        static_cast<const T*>(gy.raw_data()), static_cast<const T*>(x.raw_data()), param<A>(w), param<A>(sm),
        param<A>(si), n, c, s, training);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(layer_norm_stub, kCUDA, layer_norm_cuda);
HG_REGISTER_KERNEL(layer_norm_backward_stub, kCUDA, layer_norm_backward_cuda);
HG_REGISTER_KERNEL(batch_norm_stub, kCUDA, batch_norm_cuda);
HG_REGISTER_KERNEL(batch_norm_backward_stub, kCUDA, batch_norm_backward_cuda);
HG_REGISTER_KERNEL(batch_norm_add_relu_stub, kCUDA, batch_norm_add_relu_cuda);

}  // namespace hg::cuda
