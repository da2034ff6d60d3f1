// A CPU model of the CUDA flash-attention kernels (kernels/cuda/flash_attention.cu): the same
// algorithm step for step, so that a machine without a GPU can check the algorithm against the
// unfused composition, and a GPU run can check the kernels against this model tightly. What it
// shares with the kernels: the tiles (kernels/common/flash_attention_tiles.h), the online softmax
// (running max m and sum l per row, the output rescaled by exp(m_old - m_new) before each tile's
// P V is added), P and dS rounded to the input dtype before their products (the tensor cores take
// 16-bit operands; accumulation is in float), exp(x - y) as exp2(x log2 e - y log2 e), the saved lse = m + log(l), and
// the backward in two passes without atomics: per key tile over query tiles (dK, dV), per query tile over key tiles
// (dQ), both recomputing P = exp(S - lse). Causal runs skip the tiles above the diagonal. Only the
// order of the float sums inside one product differs (a tensor core's order is unspecified).
// Inputs are read in place through their strides, as the kernels read them.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "halfgrad.h"
#include "kernels/common/flash_attention_tiles.h"

namespace hg::test::flash_ref {

struct Forward {
  Tensor out, lse;  // out in the inputs' dtype, lse float32 [B, H, L]
};
struct Grads {
  Tensor dq, dk, dv;
};

namespace detail {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One (b, h) slice of a [B, H, N, D] tensor gathered into float rows (any strides).
template <class T>
std::vector<float> gather(const Tensor& t, int64_t b, int64_t h) {
  const T* p = static_cast<const T*>(t.raw_data());
  const int64_t N = t.size(2), D = t.size(3);
  std::vector<float> out(static_cast<size_t>(N * D));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      out[static_cast<size_t>(n * D + d)] =
          static_cast<float>(p[b * t.stride(0) + h * t.stride(1) + n * t.stride(2) + d * t.stride(3)]);
  return out;
}

// exp(x - y) as the kernels compute it: one FMA and a base-2 exponential.
inline float exp_diff(float x, float y) {
  constexpr float kLog2e = 1.4426950408889634f;
  return std::exp2(std::fma(x, kLog2e, -y * kLog2e));
}

template <class T>
float round_to(float x) {
  return static_cast<float>(T(x));
}

// The attention problem of one (b, h): scores of a tile, masked as the kernels mask them.
struct Slice {
  int64_t L, S, E, Ev;
  float scale;
  bool causal;
  const Tensor* mask;  // undefined or expanded to [B, H, L, S]
  int64_t b, h;
  std::vector<float> q, k, kt, v, vt;  // q [L, E], k [S, E], kt [E, S], v [S, Ev], vt [Ev, S]

  // s[0, C) = scaled, masked scores of row i against keys j0 .. j0 + C (-inf past S).
  void scores(int64_t i, int64_t j0, float* s) const {
    const int64_t n = std::min(kFlashCols, S - j0);
    std::fill(s, s + kFlashCols, 0.0f);
    for (int64_t e = 0; e < E; ++e) {
      const float qe = q[static_cast<size_t>(i * E + e)];
      const float* kr = kt.data() + e * S + j0;
      for (int64_t c = 0; c < n; ++c) s[c] += qe * kr[c];
    }
    for (int64_t c = 0; c < kFlashCols; ++c) {
      const int64_t j = j0 + c;
      if (j >= S || (causal && j > i)) {
        s[c] = kNegInf;
        continue;
      }
      s[c] *= scale;
      if (mask->defined()) {
        const int64_t off = b * mask->stride(0) + h * mask->stride(1) + i * mask->stride(2) + j * mask->stride(3);
        if (mask->dtype() == kBool) {
          if (!static_cast<const bool*>(mask->raw_data())[off]) s[c] = kNegInf;
        } else {
          s[c] += static_cast<const float*>(mask->raw_data())[off];
        }
      }
    }
  }
  // dp[0, C) = dO_i . v_j for keys j0 .. j0 + C (0 past S).
  void dprobs(const std::vector<float>& go, int64_t i, int64_t j0, float* dp) const {
    const int64_t n = std::min(kFlashCols, S - j0);
    std::fill(dp, dp + kFlashCols, 0.0f);
    for (int64_t c = 0; c < Ev; ++c) {
      const float g = go[static_cast<size_t>(i * Ev + c)];
      const float* vr = vt.data() + c * S + j0;
      for (int64_t x = 0; x < n; ++x) dp[x] += g * vr[x];
    }
  }
  // The last key a causal block of rows [i0, i1) can see, plus one.
  int64_t key_end(int64_t i1) const { return causal ? std::min(S, i1) : S; }
};

template <class T>
Slice make_slice(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, float scale,
                 int64_t b, int64_t h) {
  Slice sl{q.size(2), k.size(2), q.size(3), v.size(3), scale, causal, &mask, b, h, {}, {}, {}, {}, {}};
  sl.q = gather<T>(q, b, h);
  sl.k = gather<T>(k, b, h);
  const std::vector<float>& kf = sl.k;
  sl.v = gather<T>(v, b, h);
  sl.kt.resize(kf.size());
  sl.vt.resize(sl.v.size());
  for (int64_t j = 0; j < sl.S; ++j) {
    for (int64_t e = 0; e < sl.E; ++e) sl.kt[static_cast<size_t>(e * sl.S + j)] = kf[static_cast<size_t>(j * sl.E + e)];
    for (int64_t c = 0; c < sl.Ev; ++c)
      sl.vt[static_cast<size_t>(c * sl.S + j)] = sl.v[static_cast<size_t>(j * sl.Ev + c)];
  }
  return sl;
}

inline Tensor expand_mask(const Tensor& mask, const Tensor& q, const Tensor& k) {
  if (!mask.defined()) return mask;
  const Tensor m = mask.dtype() == kBool ? mask : mask.to(kFloat32);
  return expand(m, {q.size(0), q.size(1), q.size(2), k.size(2)});
}

}  // namespace detail

// out = softmax(q k^T scale + mask) v and its lse, tile by tile. mask: undefined, bool (true =
// attend) or floating (added), broadcasting to [B, H, L, S]; causal excludes it.
template <class T>
Forward forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask_in, bool causal, double scale) {
  using detail::kNegInf;
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Ev = v.size(3);
  const Tensor mask = detail::expand_mask(mask_in, q, k);
  std::vector<float> out(static_cast<size_t>(B * H * L * Ev)), lse(static_cast<size_t>(B * H * L));
  std::vector<float> s(kFlashCols), m(kFlashRows), l(kFlashRows), o(static_cast<size_t>(kFlashRows * Ev));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const detail::Slice sl = detail::make_slice<T>(q, k, v, mask, causal, static_cast<float>(scale), b, h);
      const int64_t bh = b * H + h;
      for (int64_t i0 = 0; i0 < L; i0 += kFlashRows) {
        const int64_t i1 = std::min(L, i0 + kFlashRows);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(o.begin(), o.end(), 0.0f);
        for (int64_t j0 = 0; j0 < sl.key_end(i1); j0 += kFlashCols) {
          for (int64_t i = i0; i < i1; ++i) {
            const size_t r = static_cast<size_t>(i - i0);
            sl.scores(i, j0, s.data());
            float m_new = m[r];
            for (float x : s) m_new = std::max(m_new, x);
            if (m_new == kNegInf) continue;  // every key so far masked: nothing to add
            const float alpha = detail::exp_diff(m[r], m_new);
            float sum = 0;
            for (float& x : s) {
              x = detail::exp_diff(x, m_new);
              sum += x;
            }
            l[r] = l[r] * alpha + sum;
            m[r] = m_new;
            float* orow = o.data() + r * static_cast<size_t>(Ev);
            for (int64_t c = 0; c < Ev; ++c) orow[c] *= alpha;
            const int64_t n = std::min(kFlashCols, sl.S - j0);
            for (int64_t x = 0; x < n; ++x) {
              const float p = detail::round_to<T>(s[static_cast<size_t>(x)]);
              const float* vr = sl.v.data() + (j0 + x) * Ev;
              for (int64_t c = 0; c < Ev; ++c) orow[c] += p * vr[c];
            }
          }
        }
        for (int64_t i = i0; i < i1; ++i) {
          const size_t r = static_cast<size_t>(i - i0);
          const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;  // a fully masked row gives zeros
          for (int64_t c = 0; c < Ev; ++c)
            out[static_cast<size_t>((bh * L + i) * Ev + c)] =
                detail::round_to<T>(o[r * static_cast<size_t>(Ev) + c] * inv);
          lse[static_cast<size_t>(bh * L + i)] = l[r] > 0 ? m[r] + std::log(l[r]) : kNegInf;
        }
      }
    }
  }
  return {tensor(out, {B, H, L, Ev}).to(q.dtype()), tensor(lse, {B, H, L})};
}

// The gradients of q, k, v from grad_out go, the forward's out and lse, in two passes.
template <class T>
Grads backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask_in, bool causal, double scale,
               const Tensor& out, const Tensor& lse_t, const Tensor& go_t) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), S = k.size(2), Ev = v.size(3);
  const Tensor mask = detail::expand_mask(mask_in, q, k);
  const Tensor lse_c = lse_t.contiguous();
  const float* lse = lse_c.data_ptr<float>();
  std::vector<float> dq(static_cast<size_t>(B * H * L * E)), dk(static_cast<size_t>(B * H * S * E)),
      dv(static_cast<size_t>(B * H * S * Ev));
  std::vector<float> s(kFlashCols), dp(kFlashCols), D(static_cast<size_t>(L));
  const float fscale = static_cast<float>(scale);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const detail::Slice sl = detail::make_slice<T>(q, k, v, mask, causal, fscale, b, h);
      const std::vector<float> go = detail::gather<T>(go_t, b, h), o = detail::gather<T>(out, b, h);
      const int64_t bh = b * H + h;
      for (int64_t i = 0; i < L; ++i) {  // D_i = dO_i . O_i (the preprocessing kernel)
        float acc = 0;
        for (int64_t c = 0; c < Ev; ++c)
          acc += go[static_cast<size_t>(i * Ev + c)] * o[static_cast<size_t>(i * Ev + c)];
        D[static_cast<size_t>(i)] = acc;
      }
      // P and dS of row i against the tile at j0, P rounded for its products as the kernels do.
      auto probs = [&](int64_t i, int64_t j0) {
        const float li = lse[bh * L + i];
        sl.scores(i, j0, s.data());
        sl.dprobs(go, i, j0, dp.data());
        for (int64_t x = 0; x < kFlashCols; ++x) {
          const float p = (s[x] == detail::kNegInf || li == detail::kNegInf) ? 0.0f : detail::exp_diff(s[x], li);
          dp[x] = detail::round_to<T>(p * (dp[x] - D[static_cast<size_t>(i)]));  // dS
          s[x] = detail::round_to<T>(p);
        }
      };
      // Pass 1: per key tile, over the query tiles that can see it: dV += P^T dO, dK += dS^T Q.
      for (int64_t j0 = 0; j0 < S; j0 += kFlashCols) {
        const int64_t n = std::min(kFlashCols, S - j0);
        for (int64_t i0 = causal ? j0 / kFlashRows * kFlashRows : 0; i0 < L; i0 += kFlashRows) {
          for (int64_t i = i0; i < std::min(L, i0 + kFlashRows); ++i) {
            probs(i, j0);
            const float* gr = go.data() + i * Ev;
            const float* qr = sl.q.data() + i * E;
            for (int64_t x = 0; x < n; ++x) {
              float* dvr = dv.data() + ((bh * S) + j0 + x) * Ev;
              float* dkr = dk.data() + ((bh * S) + j0 + x) * E;
              for (int64_t c = 0; c < Ev; ++c) dvr[c] += s[x] * gr[c];
              for (int64_t e = 0; e < E; ++e) dkr[e] += dp[x] * qr[e];
            }
          }
        }
      }
      // Pass 2: per query tile, over the key tiles it sees: dQ += dS K.
      for (int64_t i0 = 0; i0 < L; i0 += kFlashRows) {
        const int64_t i1 = std::min(L, i0 + kFlashRows);
        for (int64_t j0 = 0; j0 < sl.key_end(i1); j0 += kFlashCols) {
          const int64_t n = std::min(kFlashCols, S - j0);
          for (int64_t i = i0; i < i1; ++i) {
            probs(i, j0);
            float* dqr = dq.data() + (bh * L + i) * E;
            for (int64_t x = 0; x < n; ++x) {
              const float* kr = sl.k.data() + (j0 + x) * E;
              for (int64_t e = 0; e < E; ++e) dqr[e] += dp[x] * kr[e];
            }
          }
        }
      }
    }
  }
  for (float& x : dq) x *= fscale;
  for (float& x : dk) x *= fscale;
  return {tensor(dq, {B, H, L, E}).to(q.dtype()), tensor(dk, {B, H, S, E}).to(q.dtype()),
          tensor(dv, {B, H, S, Ev}).to(q.dtype())};
}

}  // namespace hg::test::flash_ref
