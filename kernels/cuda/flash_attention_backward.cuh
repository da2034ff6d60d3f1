// The flash-attention backward kernels (launched by flash_attention_backward.cu; the design is in
// its header comment). Device code only, so tests/flash_emulation can compile it for the CPU too.
#pragma once

#include "kernels/cuda/flash_attention.cuh"

namespace hg::cuda::flash {

constexpr int kDotRows = 8;  // query rows (warps) per block of the D_i kernel

template <class T>
__global__ void flash_backward_dot_kernel(Params p, Operand go, Operand o, float* __restrict__ dd) {
  using W = typename Wide<T>::W;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kDotRows + threadIdx.x / 32;
  if (row >= p.B * p.H * p.L) return;
  const int64_t bh = row / p.L, i = row % p.L, b = bh / p.H, h = bh % p.H;
  const W* g = static_cast<const W*>(go.data) + b * go.s0 + h * go.s1 + i * go.s2;
  const W* x = static_cast<const W*>(o.data) + b * o.s0 + h * o.s1 + i * o.s2;
  float acc = 0.0f;
  for (int64_t c = lane; c < p.Ev; c += 32) acc += Wide<T>::to(g[c * go.s3]) * Wide<T>::to(x[c * o.s3]);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) dd[row] = acc;
}

// The shared-memory sections of both backward kernels (byte offsets, all multiples of 32). P and
// dS (16-bit) overwrite the S and dP (float) rows they are computed from: see packed_col.
template <int D>
struct BwdLayout {
  static constexpr int ld = D + kPadHalf, lds = kCols + kPadFloat, ldp = 2 * lds;  // ldp: 16-bit view
  static constexpr size_t tile = size_t{kRows} * ld * 2;
  static constexpr size_t k = 0, v = tile, q = 2 * tile, go = 3 * tile, s = 4 * tile, dp = s + size_t{kRows} * lds * 4,
                          lse = dp + size_t{kRows} * lds * 4, dd = lse + kRows * 4;
  static_assert(dd + kRows * 4 == backward_smem_bytes<D>());
};

// Where 16-bit column c of a row goes when it overwrites the float row it was computed from, in
// 16-bit elements from the row's start: the lane of columns [0, 32) writes them over its own
// floats [0, 16), the lane of [32, 64) over its own floats [32, 48), each into floats it has
// already read (c / 2 <= c), so no lane overwrites a float another lane still needs.
__device__ __forceinline__ int packed_col(int c) { return c < 32 ? c : c + 32; }

// acc[n] (16 x 16 tiles of a 16 x D product) += A (16 x 64, 16-bit, row-major, lda, its columns
// placed by packed_col) times B (64 x D, 16-bit, row-major, ldb).
template <class W, int D>
__device__ __forceinline__ void add_product(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[D / 16],
                                            const W* a, int lda, const W* bm, int ldb) {
#pragma unroll
  for (int t = 0; t < kCols / 16; ++t) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> af;
    wmma::load_matrix_sync(af, a + packed_col(t * 16), lda);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> bf;
      wmma::load_matrix_sync(bf, bm + t * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], af, bf, acc[n]);
    }
  }
}

// out (16 x 64 float, ldo) = A (16 x D rows of a tile, ld) times B^T, B the 64 x D tile at bm.
template <class W, int D>
__device__ __forceinline__ void product_transposed(float* out, int ldo, const W* a, const W* bm, int ld) {
#pragma unroll
  for (int n = 0; n < kCols / 16; ++n) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int t = 0; t < D / 16; ++t) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> af;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> bf;  // B^T: element (d, x) at bm[x][d]
      wmma::load_matrix_sync(af, a + t * 16, ld);
      wmma::load_matrix_sync(bf, bm + n * 16 * ld + t * 16, ld);
      wmma::mma_sync(acc, af, bf, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, ldo, wmma::mem_row_major);
  }
}

// Writes a warp's accumulators times `mul` (a 16 x D slab at rows n0) through the scratch tile.
template <class T, int D>
__device__ __forceinline__ void write_grad(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[D / 16],
                                           float mul, float* scratch, void* out, const Operand& op, int64_t b,
                                           int64_t h, int64_t n0, int64_t N, int64_t dim, int lane) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(scratch + n * 16, acc[n], D + kPadFloat, wmma::mem_row_major);
  __syncwarp();
  store_rows<T, D>(out, op, b, h, n0, N, dim, scratch, lane, mul);
  __syncwarp();
}

// Pass 2 (dK, dV): grid (key tiles, B H). Each warp owns keys j0 + 16 warp .. + 16.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(Params p, Operand q, Operand k, Operand v, Operand go, Operand gk, Operand gv,
                             const float* __restrict__ lse, const float* __restrict__ dd, void* dk_out, void* dv_out) {
  using W = typename Wide<T>::W;
  using Lay = BwdLayout<D>;
  extern __shared__ __align__(128) unsigned char flash_kv_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  W* ks = reinterpret_cast<W*>(flash_kv_smem + Lay::k);
  W* vs = reinterpret_cast<W*>(flash_kv_smem + Lay::v);
  W* qs = reinterpret_cast<W*>(flash_kv_smem + Lay::q);
  W* gos = reinterpret_cast<W*>(flash_kv_smem + Lay::go);
  float* st = reinterpret_cast<float*>(flash_kv_smem + Lay::s) + warp * 16 * Lay::lds;    // S^T, 16 keys x 64 queries
  float* dpt = reinterpret_cast<float*>(flash_kv_smem + Lay::dp) + warp * 16 * Lay::lds;  // dP^T
  W* pt = reinterpret_cast<W*>(st);                                                       // P^T over S^T
  W* dst = reinterpret_cast<W*>(dpt);                                                     // dS^T over dP^T
  float* lse_s = reinterpret_cast<float*>(flash_kv_smem + Lay::lse);
  float* dd_s = reinterpret_cast<float*>(flash_kv_smem + Lay::dd);

  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kCols;
  load_tile<T, D>(ks, k, b, h, j0, p.S, p.E);
  load_tile<T, D>(vs, v, b, h, j0, p.S, p.Ev);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int r = lane >> 1, half = lane & 1;  // this lane's key of the warp's 16, and its 32 queries
  const int64_t j = j0 + warp * 16 + r;
  // Causal: queries i < j0 see none of these keys; the first query tile is the one holding j0.
  for (int64_t i0 = p.causal ? j0 / kRows * kRows : 0; i0 < p.L; i0 += kRows) {
    __syncthreads();  // every warp is done with the previous Q and dO tiles
    load_tile<T, D>(qs, q, b, h, i0, p.L, p.E);
    load_tile<T, D>(gos, go, b, h, i0, p.L, p.Ev);
    for (int x = threadIdx.x; x < kRows; x += kThreads) {
      const bool in = i0 + x < p.L;
      lse_s[x] = in ? lse[bh * p.L + i0 + x] : -INFINITY;
      dd_s[x] = in ? dd[bh * p.L + i0 + x] : 0.0f;
    }
    __syncthreads();
    product_transposed<W, D>(st, Lay::lds, ks + warp * 16 * Lay::ld, qs, Lay::ld);
    product_transposed<W, D>(dpt, Lay::lds, vs + warp * 16 * Lay::ld, gos, Lay::ld);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int64_t i = i0 + c;
      const float s = masked_score(p, b, h, i, j, st[r * Lay::lds + c]);
      const float l = lse_s[c];
      const float pr = (s == -INFINITY || l == -INFINITY) ? 0.0f : exp_diff(s, l);
      const float ds = pr * (dpt[r * Lay::lds + c] - dd_s[c]);
      pt[r * Lay::ldp + packed_col(c)] = Wide<T>::from(pr);
      dst[r * Lay::ldp + packed_col(c)] = Wide<T>::from(ds);
    }
    __syncwarp();
    add_product<W, D>(dv, pt, Lay::ldp, gos, Lay::ld);
    add_product<W, D>(dk, dst, Lay::ldp, qs, Lay::ld);
  }
  __syncthreads();  // the Q and dO tiles become each warp's float scratch of 16 x (D + 4)
  float* scratch = reinterpret_cast<float*>(flash_kv_smem + Lay::q) + warp * 16 * (D + kPadFloat);
  write_grad<T, D>(dk, p.scale, scratch, dk_out, gk, b, h, j0 + warp * 16, p.S, p.E, lane);
  write_grad<T, D>(dv, 1.0f, scratch, dv_out, gv, b, h, j0 + warp * 16, p.S, p.Ev, lane);
}

// Pass 3 (dQ): grid (query tiles, B H), longest causal rows first. Each warp owns 16 query rows.
template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(Params p, Operand q, Operand k, Operand v, Operand go, Operand gq,
                            const float* __restrict__ lse, const float* __restrict__ dd, void* dq_out) {
  using W = typename Wide<T>::W;
  using Lay = BwdLayout<D>;
  extern __shared__ __align__(128) unsigned char flash_q_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  W* ks = reinterpret_cast<W*>(flash_q_smem + Lay::k);
  W* vs = reinterpret_cast<W*>(flash_q_smem + Lay::v);
  W* qs = reinterpret_cast<W*>(flash_q_smem + Lay::q);
  W* gos = reinterpret_cast<W*>(flash_q_smem + Lay::go);
  float* ss = reinterpret_cast<float*>(flash_q_smem + Lay::s) + warp * 16 * Lay::lds;
  float* dps = reinterpret_cast<float*>(flash_q_smem + Lay::dp) + warp * 16 * Lay::lds;
  W* dss = reinterpret_cast<W*>(dps);  // dS over dP

  const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int64_t i0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kRows;
  load_tile<T, D>(qs, q, b, h, i0, p.L, p.E);
  load_tile<T, D>(gos, go, b, h, i0, p.L, p.Ev);
  const int r = lane >> 1, half = lane & 1;
  const int64_t i = i0 + warp * 16 + r;
  const float l = i < p.L ? lse[bh * p.L + i] : -INFINITY;
  const float di = i < p.L ? dd[bh * p.L + i] : 0.0f;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  const int64_t i_end = i0 + kRows < p.L ? i0 + kRows : p.L;
  const int64_t j_end = p.causal ? (i_end < p.S ? i_end : p.S) : p.S;
  for (int64_t j0 = 0; j0 < j_end; j0 += kCols) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_tile<T, D>(ks, k, b, h, j0, p.S, p.E);
    load_tile<T, D>(vs, v, b, h, j0, p.S, p.Ev);
    __syncthreads();
    product_transposed<W, D>(ss, Lay::lds, qs + warp * 16 * Lay::ld, ks, Lay::ld);
    product_transposed<W, D>(dps, Lay::lds, gos + warp * 16 * Lay::ld, vs, Lay::ld);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float s = masked_score(p, b, h, i, j0 + c, ss[r * Lay::lds + c]);
      const float pr = (s == -INFINITY || l == -INFINITY) ? 0.0f : exp_diff(s, l);
      const float ds = pr * (dps[r * Lay::lds + c] - di);
      dss[r * Lay::ldp + packed_col(c)] = Wide<T>::from(ds);
    }
    __syncwarp();
    add_product<W, D>(dq, dss, Lay::ldp, ks, Lay::ld);
  }
  __syncthreads();
  float* scratch = reinterpret_cast<float*>(flash_q_smem + Lay::q) + warp * 16 * (D + kPadFloat);
  write_grad<T, D>(dq, p.scale, scratch, dq_out, gq, b, h, i0 + warp * 16, p.L, p.E, lane);
}

}  // namespace hg::cuda::flash
