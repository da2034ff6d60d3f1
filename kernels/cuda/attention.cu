// CUDA scaled-dot-product attention: one warp per query row. Forward: each lane scores keys
// lane, lane + 32, ... (32 at a time), the warp keeps an online max and sum, and each lane owns
// features lane, lane + 32, ... of the output (Ev <= 256). Backward recomputes the weights from
// the saved log-sum-exp (as the CPU kernel); dk and dv are accumulated with atomics in the compute
// dtype. Same dropout draws as the CPU kernel. A straightforward kernel, not a tuned one: float16
// and bfloat16 without dropout take the tensor-core flash kernels instead (flash_attention.h), and
// this kernel stays for float32/float64, dropout, head dims over 128 and the mask gradient.
#include <cstdint>

#include "framework/dispatch.h"
#include "framework/ops/attention_kernels.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "kernels/common/splitmix64.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {
namespace {

constexpr int kWarp = 32, kRowsPerBlock = 4, kMaxChunks = 8;  // E, Ev <= 256

template <class C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class C>
__device__ __forceinline__ C warp_max(C v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct Params {
  int64_t BH, H, L, S, E, Ev;
  double scale;
  bool causal;
  int mask_kind;  // 0 none, 1 bool, 2 additive (compute dtype)
  const void* mask;
  int64_t ms0, ms1, ms2, ms3;
  bool dropout;
  uint64_t seed, threshold;
  const uint64_t* seed_table;  // in a CUDA graph capture: seed is a slot of this table
  double inv_keep;
};

// The scaled, masked score of key j for the row whose (scaled) query is qs; -inf when masked.
template <class T, class C>
__device__ C score(const Params& p, const C* qs, const T* kb, int64_t bh, int64_t i, int64_t j) {
  C s = 0;
  const T* kr = kb + j * p.E;
  for (int64_t e = 0; e < p.E; ++e) s += qs[e] * static_cast<C>(to_acc(kr[e]));
  if (p.mask_kind) {
    const int64_t off = (bh / p.H) * p.ms0 + (bh % p.H) * p.ms1 + i * p.ms2 + j * p.ms3;
    if (p.mask_kind == 1) {
      if (!static_cast<const bool*>(p.mask)[off]) s = -INFINITY;
    } else {
      s += static_cast<const C*>(p.mask)[off];
    }
  }
  return s;
}

template <class C>
__device__ __forceinline__ C drop_factor(const Params& p, int64_t row, int64_t j) {
  if (!p.dropout) return C(1);
  const uint64_t seed = p.seed_table != nullptr ? p.seed_table[p.seed] : p.seed;
  const uint64_t u = splitmix64(seed + static_cast<uint64_t>(row * p.S + j)) >> 11;
  return u >= p.threshold ? static_cast<C>(p.inv_keep) : C(0);
}

// Dynamic shared memory: kRowsPerBlock scaled query rows of E values.
template <class T, class C>
__global__ void attention_forward_kernel(T* __restrict__ out, C* __restrict__ lse, const T* __restrict__ q,
                                         const T* __restrict__ k, const T* __restrict__ v, Params p) {
  extern __shared__ unsigned char smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= p.BH * p.L) return;
  const int64_t bh = row / p.L, i = row % p.L;
  C* qs = reinterpret_cast<C*>(smem) + warp * p.E;
  for (int64_t e = lane; e < p.E; e += kWarp)
    qs[e] = static_cast<C>(to_acc(q[row * p.E + e])) * static_cast<C>(p.scale);
  __syncwarp();
  const T* kb = k + bh * p.S * p.E;
  const T* vb = v + bh * p.S * p.Ev;
  const int64_t n = p.causal ? min(p.S, i + 1) : p.S;
  C m = -INFINITY, sum = 0, acc[kMaxChunks] = {};
  for (int64_t j0 = 0; j0 < n; j0 += kWarp) {
    const int64_t j = j0 + lane;
    const C s = j < n ? score<T, C>(p, qs, kb, bh, i, j) : C(-INFINITY);
    const C bm = warp_max(s), m_new = max(m, bm);
    if (m_new == -INFINITY) continue;  // everything so far masked
    const C corr = m == -INFINITY ? C(0) : exp(m - m_new);
    const C e = s == -INFINITY ? C(0) : exp(s - m_new);
    sum = sum * corr + warp_sum(e);
    const C w = e * drop_factor<C>(p, row, j);
    for (int c = 0; c < kMaxChunks; ++c) acc[c] *= corr;
    const int64_t cnt = min(static_cast<int64_t>(kWarp), n - j0);
    for (int64_t jj = 0; jj < cnt; ++jj) {
      const C wj = __shfl_sync(0xffffffffu, w, static_cast<int>(jj));
      const T* vr = vb + (j0 + jj) * p.Ev;
      for (int c = 0; c < kMaxChunks; ++c) {
        const int64_t f = lane + c * kWarp;
        if (f < p.Ev) acc[c] += wj * static_cast<C>(to_acc(vr[f]));
      }
    }
    m = m_new;
  }
  const bool empty = m == -INFINITY;
  const C inv = empty ? C(0) : C(1) / sum;
  for (int c = 0; c < kMaxChunks; ++c) {
    const int64_t f = lane + c * kWarp;
    if (f < p.Ev) out[row * p.Ev + f] = from_acc<T>(static_cast<acc_t<T>>(acc[c] * inv));
  }
  if (lane == 0) lse[row] = empty ? C(-INFINITY) : m + log(sum);
}

// dk, dv: zeroed accumulators in the compute dtype; gm: [BH, L, S] or null.
template <class T, class C>
__global__ void attention_backward_kernel(T* __restrict__ gq, C* __restrict__ dk, C* __restrict__ dv,
                                          C* __restrict__ gm, const T* __restrict__ go, const T* __restrict__ o,
                                          const C* __restrict__ lse, const T* __restrict__ q, const T* __restrict__ k,
                                          const T* __restrict__ v, Params p) {
  extern __shared__ unsigned char smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= p.BH * p.L) return;
  const int64_t bh = row / p.L, i = row % p.L;
  C* qs = reinterpret_cast<C*>(smem) + warp * (p.E + p.Ev);
  C* gf = qs + p.E;
  for (int64_t e = lane; e < p.E; e += kWarp)
    qs[e] = static_cast<C>(to_acc(q[row * p.E + e])) * static_cast<C>(p.scale);
  C part = 0;
  for (int64_t c = lane; c < p.Ev; c += kWarp) {
    gf[c] = static_cast<C>(to_acc(go[row * p.Ev + c]));
    part += gf[c] * static_cast<C>(to_acc(o[row * p.Ev + c]));
  }
  const C D = warp_sum(part);
  __syncwarp();
  const C l = lse[row];
  const int64_t n = p.causal ? min(p.S, i + 1) : p.S;
  if (gm)
    for (int64_t j = lane; j < p.S; j += kWarp) gm[row * p.S + j] = C(0);
  C dq[kMaxChunks] = {};
  const T* kb = k + bh * p.S * p.E;
  const T* vb = v + bh * p.S * p.Ev;
  if (l != -INFINITY) {
    for (int64_t j0 = 0; j0 < n; j0 += kWarp) {
      const int64_t j = j0 + lane;
      C pz = 0, ds = 0;
      if (j < n) {
        const C s = score<T, C>(p, qs, kb, bh, i, j);
        const C pj = s == -INFINITY ? C(0) : exp(s - l);
        C dp = 0;
        const T* vr = vb + j * p.Ev;
        for (int64_t c = 0; c < p.Ev; ++c) dp += gf[c] * static_cast<C>(to_acc(vr[c]));
        const C z = drop_factor<C>(p, row, j);
        pz = pj * z;
        ds = pj * (dp * z - D);
        if (gm) gm[row * p.S + j] = ds;
      }
      const int64_t cnt = min(static_cast<int64_t>(kWarp), n - j0);
      for (int64_t jj = 0; jj < cnt; ++jj) {
        const C pzj = __shfl_sync(0xffffffffu, pz, static_cast<int>(jj));
        const C dsj = __shfl_sync(0xffffffffu, ds, static_cast<int>(jj));
        const int64_t jg = j0 + jj;
        for (int64_t c = lane; c < p.Ev; c += kWarp) atomicAdd(dv + (bh * p.S + jg) * p.Ev + c, pzj * gf[c]);
        const T* kr = kb + jg * p.E;
        for (int ch = 0; ch < kMaxChunks; ++ch) {
          const int64_t e = lane + ch * kWarp;
          if (e < p.E) {
            dq[ch] += dsj * static_cast<C>(to_acc(kr[e]));
            atomicAdd(dk + (bh * p.S + jg) * p.E + e, dsj * qs[e]);
          }
        }
      }
    }
  }
  for (int ch = 0; ch < kMaxChunks; ++ch) {
    const int64_t e = lane + ch * kWarp;
    if (e < p.E) gq[row * p.E + e] = from_acc<T>(static_cast<acc_t<T>>(dq[ch] * static_cast<C>(p.scale)));
  }
}

template <class T, class C>
__global__ void convert_kernel(T* __restrict__ dst, const C* __restrict__ src, int64_t n) {
  const int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x < n) dst[x] = from_acc<T>(static_cast<acc_t<T>>(src[x]));
}

Params make_params(const AttentionArgs& a) {
  Params p{};
  p.BH = a.q.size(0) * a.q.size(1);
  p.H = a.q.size(1);
  p.L = a.q.size(2);
  p.S = a.k.size(2);
  p.E = a.q.size(3);
  p.Ev = a.v.size(3);
  HG_CHECK(p.E <= kWarp * kMaxChunks && p.Ev <= kWarp * kMaxChunks, "scaled_dot_product_attention",
           "the CUDA kernel handles embedding dims up to {}, got E = {}, Ev = {}", kWarp * kMaxChunks, p.E, p.Ev);
  HG_CHECK(p.BH * p.L / kRowsPerBlock < INT32_MAX, "scaled_dot_product_attention", "{} query rows are too many",
           p.BH * p.L);
  p.scale = a.scale;
  p.causal = a.causal;
  if (a.mask.defined()) {
    p.mask_kind = a.mask.dtype() == kBool ? 1 : 2;
    p.mask = a.mask.raw_data();
    p.ms0 = a.mask.strides()[0];
    p.ms1 = a.mask.strides()[1];
    p.ms2 = a.mask.strides()[2];
    p.ms3 = a.mask.strides()[3];
  }
  p.dropout = a.dropout_p > 0.0;
  p.seed = a.seed;
  p.seed_table = p.dropout ? capture_seed_table(static_cast<int>(a.q.device().index)) : nullptr;
  p.threshold = static_cast<uint64_t>(a.dropout_p * 0x1.0p53);
  p.inv_keep = 1.0 / (1.0 - a.dropout_p);
  return p;
}

unsigned blocks_for(const Params& p) { return static_cast<unsigned>((p.BH * p.L + kRowsPerBlock - 1) / kRowsPerBlock); }

// This kernel reads q, k, v (and the backward's out) contiguous and writes out contiguous; the op
// passes them as they are (the flash kernels read and write strides).
AttentionArgs contiguous_args(const AttentionArgs& a) {
  AttentionArgs c = a;
  c.q = internal::contiguous(a.q);
  c.k = internal::contiguous(a.k);
  c.v = internal::contiguous(a.v);
  return c;
}

void attention_cuda(const Tensor& out, const Tensor& lse, const AttentionArgs& args) {
  if (flash_attention_supported(args)) {
    flash_attention_forward(out, lse, args);
    return;
  }
  if (!out.is_contiguous()) {  // this kernel writes a contiguous output
    const Tensor dense = empty(out.shape(), TensorOptions(out.dtype()).device(out.device()));
    attention_cuda(dense, lse, args);
    copy_stub(kCUDA, out, dense);
    return;
  }
  const AttentionArgs a = contiguous_args(args);
  const Params p = make_params(a);
  if (p.BH * p.L == 0) return;
  const int dev = a.q.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(a.q.dtype(), "scaled_dot_product_attention", [&]<class T>(TypeTag<T>) {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const size_t shm = sizeof(C) * static_cast<size_t>(kRowsPerBlock * p.E);
    attention_forward_kernel<T, C><<<blocks_for(p), kRowsPerBlock * kWarp, shm, current_stream(dev)>>>(
        static_cast<T*>(out.raw_data()), static_cast<C*>(lse.raw_data()), static_cast<const T*>(a.q.raw_data()),
        static_cast<const T*>(a.k.raw_data()), static_cast<const T*>(a.v.raw_data()), p);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void attention_backward_cuda(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& gm, const Tensor& go,
                             const Tensor& o_in, const Tensor& lse, const AttentionArgs& args) {
  // Both forwards save the same lse, so either backward follows either forward.
  if (!gm.defined() && flash_attention_supported(args)) {
    flash_attention_backward(gq, gk, gv, go, o_in, lse, args);
    return;
  }
  const AttentionArgs a = contiguous_args(args);
  const Tensor o = internal::contiguous(o_in);
  const Params p = make_params(a);
  const int dev = a.q.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(a.q.dtype(), "scaled_dot_product_attention", [&]<class T>(TypeTag<T>) {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr bool kSame = std::is_same_v<T, C>;
    cudaStream_t stream = current_stream(dev);
    // dk, dv accumulate in the compute dtype: directly in gk, gv for float32/float64.
    const Tensor dk = kSame ? gk : empty(gk.shape(), TensorOptions(dtype_of<C>).device(gk.device()));
    const Tensor dv = kSame ? gv : empty(gv.shape(), TensorOptions(dtype_of<C>).device(gv.device()));
    if (dk.numel()) HG_CUDA_CHECK(cudaMemsetAsync(dk.raw_data(), 0, sizeof(C) * dk.numel(), stream));
    if (dv.numel()) HG_CUDA_CHECK(cudaMemsetAsync(dv.raw_data(), 0, sizeof(C) * dv.numel(), stream));
    if (p.BH * p.L > 0) {
      const size_t shm = sizeof(C) * static_cast<size_t>(kRowsPerBlock * (p.E + p.Ev));
      attention_backward_kernel<T, C><<<blocks_for(p), kRowsPerBlock * kWarp, shm, stream>>>(
          static_cast<T*>(gq.raw_data()), static_cast<C*>(dk.raw_data()), static_cast<C*>(dv.raw_data()),
          gm.defined() ? static_cast<C*>(gm.raw_data()) : nullptr, static_cast<const T*>(go.raw_data()),
          static_cast<const T*>(o.raw_data()), static_cast<const C*>(lse.raw_data()),
          static_cast<const T*>(a.q.raw_data()), static_cast<const T*>(a.k.raw_data()),
          static_cast<const T*>(a.v.raw_data()), p);
      HG_CUDA_CHECK_LAUNCH();
    }
    if constexpr (!kSame) {
      for (auto [dst, src] : {std::pair{gk, dk}, std::pair{gv, dv}}) {
        const int64_t n = dst.numel();
        if (!n) continue;
        convert_kernel<T, C><<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(
            static_cast<T*>(dst.raw_data()), static_cast<const C*>(src.raw_data()), n);
        HG_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(attention_stub, kCUDA, attention_cuda);
HG_REGISTER_KERNEL(attention_backward_stub, kCUDA, attention_backward_cuda);

}  // namespace hg::cuda
