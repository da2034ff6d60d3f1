// The flash-attention forward kernel (launched by flash_attention_forward.cu; the design is in its
// header comment). Device code only, so tests/flash_emulation can compile it for the CPU too.
#pragma once

#include "kernels/cuda/flash_attention.cuh"

namespace hg::cuda::flash {

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Params p, Operand q, Operand k, Operand v, Operand o, void* out, float* __restrict__ lse) {
  using W = typename Wide<T>::W;
  constexpr int ld = D + kPadHalf, lds = kCols + kPadFloat, ldp = kCols + kPadHalf, ldo = D + kPadFloat;
  constexpr int kSteps = D / 16;
  extern __shared__ __align__(128) unsigned char flash_fwd_smem[];
  // Byte offsets of the sections; each is a multiple of 32 bytes, as are the per-warp slices.
  constexpr size_t kOffK = size_t{kRows} * ld * 2, kOffV = kOffK + size_t{kCols} * ld * 2,
                   kOffS = kOffV + size_t{kCols} * ld * 2, kOffP = kOffS + size_t{kRows} * lds * 4,
                   kOffO = kOffP + size_t{kRows} * ldp * 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  W* qs = reinterpret_cast<W*>(flash_fwd_smem);
  W* ks = reinterpret_cast<W*>(flash_fwd_smem + kOffK);
  W* vs = reinterpret_cast<W*>(flash_fwd_smem + kOffV);
  float* ss = reinterpret_cast<float*>(flash_fwd_smem + kOffS) + warp * 16 * lds;
  W* ps = reinterpret_cast<W*>(flash_fwd_smem + kOffP) + warp * 16 * ldp;
  float* os = reinterpret_cast<float*>(flash_fwd_smem + kOffO) + warp * 16 * ldo;

  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;  // longest causal rows first
  load_tile<T, D>(qs, q, b, h, i0, p.L, p.E);
  for (int x = lane; x < 16 * ldo; x += 32) os[x] = 0.0f;
  __syncthreads();
  // This warp's 16 query rows stay in registers as matrix_a fragments for the whole key loop.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> qf[kSteps];
#pragma unroll
  for (int t = 0; t < kSteps; ++t) wmma::load_matrix_sync(qf[t], qs + warp * 16 * ld + t * 16, ld);

  const int r = lane >> 1, half = lane & 1;  // this lane's row of the warp's 16, and its 32 columns
  const int64_t i = i0 + warp * 16 + r;
  float m = -INFINITY, l = 0.0f;
  const int64_t i_end = i0 + kRows < p.L ? i0 + kRows : p.L;
  const int64_t j_end = p.causal ? (i_end < p.S ? i_end : p.S) : p.S;
  for (int64_t j0 = 0; j0 < j_end; j0 += kCols) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile<T, D>(ks, k, b, h, j0, p.S, p.E);
    load_tile<T, D>(vs, v, b, h, j0, p.S, p.Ev);
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kCols / 16; ++n) {  // S[:, 16n, 16n + 16) = Q K^T
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int t = 0; t < kSteps; ++t) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> kf;  // K^T: element (d, j) at ks[j][d]
        wmma::load_matrix_sync(kf, ks + n * 16 * ld + t * 16, ld);
        wmma::mma_sync(acc, qf[t], kf, acc);
      }
      wmma::store_matrix_sync(ss + n * 16, acc, lds, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over this lane's 32 columns, combined with the other lane of the row.
    float* srow = ss + r * lds + half * 32;
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const float s = masked_score(p, b, h, i, j0 + half * 32 + c, srow[c]);
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);
    const bool none = m_new == -INFINITY;  // every key so far masked: add nothing, keep O at 0
    const float alpha = none ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
    W* prow = ps + r * ldp + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float e = none ? 0.0f : expf(srow[c] - m_new);
      sum += e;
      prow[c] = Wide<T>::from(e);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = os + r * ldo + half * (D / 2);
    for (int c = 0; c < D / 2; ++c) orow[c] *= alpha;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < kSteps; ++n) {  // O[:, 16n, 16n + 16) += P V
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + n * 16, ldo, wmma::mem_row_major);
#pragma unroll
      for (int t = 0; t < kCols / 16; ++t) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, ps + t * 16, ldp);
        wmma::load_matrix_sync(vf, vs + t * 16 * ld + n * 16, ld);
        wmma::mma_sync(acc, pf, vf, acc);
      }
      wmma::store_matrix_sync(os + n * 16, acc, ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  // A fully masked row (l == 0) gives zeros and lse = -inf, as the fallback kernel.
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  store_rows<T, D>(out, o, b, h, i0 + warp * 16, p.L, p.Ev, os, lane, inv);
  if (half == 0 && i < p.L) lse[bh * p.L + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

}  // namespace hg::cuda::flash
