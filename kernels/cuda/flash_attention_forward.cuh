// The flash-attention forward kernel (launched by flash_attention_forward.cu; the design is in its
// header comment). Device code only, so tests/flash_emulation can compile it for the CPU too.
#pragma once

#include "kernels/cuda/flash_attention.cuh"

namespace hg::cuda::flash {

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Params p, Operand q, Operand k, Operand v, Operand o, void* out, float* __restrict__ lse) {
  using W = typename Wide<T>::W;
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  constexpr int ld = D + kPadHalf, lds = kCols + kPadFloat, ldp = kCols + kPadHalf;
  constexpr int kSteps = D / 16;
  extern __shared__ __align__(128) unsigned char flash_fwd_smem[];
  // Byte offsets of the sections; each is a multiple of 32 bytes, as are the per-warp slices.
  constexpr size_t kOffK = size_t{kRows} * ld * 2, kOffV = kOffK + size_t{kCols} * ld * 2,
                   kOffS = kOffV + size_t{kCols} * ld * 2, kOffP = kOffS + size_t{kRows} * lds * 4,
                   kOffA = kOffP + size_t{kRows} * ldp * 2;
  static_assert(kOffA + kRows * 4 == forward_smem_bytes<D>());
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  W* qs = reinterpret_cast<W*>(flash_fwd_smem);
  W* ks = reinterpret_cast<W*>(flash_fwd_smem + kOffK);
  W* vs = reinterpret_cast<W*>(flash_fwd_smem + kOffV);
  float* ss = reinterpret_cast<float*>(flash_fwd_smem + kOffS) + warp * 16 * lds;
  W* ps = reinterpret_cast<W*>(flash_fwd_smem + kOffP) + warp * 16 * ldp;
  float* alpha_s = reinterpret_cast<float*>(flash_fwd_smem + kOffA) + warp * 16;  // per row of the warp

  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;  // longest causal rows first
  load_tile<T, D>(qs, q, b, h, i0, p.L, p.E);
  // Which of the warp's 16 rows each accumulator element of this lane holds: wmma's fragment
  // layout is unspecified, but a loaded tile whose element (r, c) is r says (loads, stores and
  // mma_sync of one fragment type share one layout). O stays in registers, rescaled per row.
  for (int x = lane; x < 256; x += 32) ss[(x / 16) * lds + x % 16] = static_cast<float>(x / 16);
  __syncthreads();
  Acc row_of;
  wmma::load_matrix_sync(row_of, ss, lds, wmma::mem_row_major);
  // This warp's 16 query rows stay in registers as matrix_a fragments for the whole key loop.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> qf[kSteps];
#pragma unroll
  for (int t = 0; t < kSteps; ++t) wmma::load_matrix_sync(qf[t], qs + warp * 16 * ld + t * 16, ld);
  Acc acc_o[kSteps];
#pragma unroll
  for (int n = 0; n < kSteps; ++n) wmma::fill_fragment(acc_o[n], 0.0f);
  __syncwarp();  // every lane has read the row tile before S overwrites it

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
      Acc acc;
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
    const float alpha = none ? 1.0f : exp_diff(m, m_new);
    float sum = 0.0f;
    W* prow = ps + r * ldp + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float e = none ? 0.0f : exp_diff(srow[c], m_new);
      sum += e;
      prow[c] = Wide<T>::from(e);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    if (half == 0) alpha_s[r] = alpha;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < kSteps; ++n)  // O *= alpha, row by row
      for (int e = 0; e < acc_o[n].num_elements; ++e) acc_o[n].x[e] *= alpha_s[static_cast<int>(row_of.x[e])];
#pragma unroll
    for (int t = 0; t < kCols / 16; ++t) {  // O += P V, one 16-key slice of P at a time
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> pf;
      wmma::load_matrix_sync(pf, ps + t * 16, ldp);
#pragma unroll
      for (int n = 0; n < kSteps; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> vf;
        wmma::load_matrix_sync(vf, vs + t * 16 * ld + n * 16, ld);
        wmma::mma_sync(acc_o[n], pf, vf, acc_o[n]);
      }
    }
  }
  __syncthreads();  // the K and V tiles become each warp's float scratch of 16 x (D + 4)
  float* scratch = reinterpret_cast<float*>(flash_fwd_smem + kOffK) + warp * 16 * (D + kPadFloat);
#pragma unroll
  for (int n = 0; n < kSteps; ++n)
    wmma::store_matrix_sync(scratch + n * 16, acc_o[n], D + kPadFloat, wmma::mem_row_major);
  __syncwarp();
  // A fully masked row (l == 0) gives zeros and lse = -inf, as the fallback kernel.
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  store_rows<T, D>(out, o, b, h, i0 + warp * 16, p.L, p.Ev, scratch, lane, inv);
  if (half == 0 && i < p.L) lse[bh * p.L + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

}  // namespace hg::cuda::flash
