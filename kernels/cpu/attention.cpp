// CPU scaled-dot-product attention. Forward: per (b, h) and a block of query rows, the block's keys
// are laid out transposed in the compute dtype once, then each query row gets one row of scores
// (the only O(S) scratch: no [L, S] matrix), a max-subtracted softmax, and the weighted sum of v.
// Backward (flash-attention style): per (b, h), recompute each row's weights from q, k and the saved
// log-sum-exp, then accumulate dq (per row) and dk, dv (per head, in the compute dtype).
// The innermost loops run along keys or features, never a reduction, so they vectorise.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/ops/attention_kernels.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/common/splitmix64.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/vec_math.h"

namespace hg::cpu {
namespace {

constexpr int64_t kRowBlock = 32;  // query rows per forward task: converts K once per 32 rows

// The mask row of (b, h, i): element j at row[j * sj]; kind 0 none, 1 bool, 2 additive.
struct MaskRows {
  const char* base = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0, sj = 0;
  int kind = 0;
  int64_t H = 1;
  explicit MaskRows(const Tensor& m, int64_t heads) : H(heads) {
    if (!m.defined()) return;
    kind = m.dtype() == kBool ? 1 : 2;
    base = static_cast<const char*>(m.raw_data());
    s0 = m.strides()[0];
    s1 = m.strides()[1];
    s2 = m.strides()[2];
    sj = m.strides()[3];
  }
  template <class M>
  const M* row(int64_t bh, int64_t i) const {
    return reinterpret_cast<const M*>(base) + (bh / H) * s0 + (bh % H) * s1 + i * s2;
  }
};

// Adds the mask to s[0, n): bool false -> -inf.
template <class C>
void apply_mask(const MaskRows& mr, int64_t bh, int64_t i, C* s, int64_t n) {
  if (mr.kind == 1) {
    const bool* m = mr.row<bool>(bh, i);
    for (int64_t j = 0; j < n; ++j)
      if (!m[j * mr.sj]) s[j] = -std::numeric_limits<C>::infinity();
  } else if (mr.kind == 2) {
    const C* m = mr.row<C>(bh, i);
    for (int64_t j = 0; j < n; ++j) s[j] += m[j * mr.sj];
  }
}

// acc[0, len) += sum_r w[r] rows[r * ld + (0, len)] for r < count: four rows per pass, so the
// accumulator is read and written a quarter as often (its load-add-store chain is what limits the
// short rows attention has). Scores, the weighted sum of v, dp and dq are all this shape.
template <class C>
void add_rows(C* __restrict acc, const C* __restrict w, const C* __restrict rows, int64_t ld, int64_t count,
              int64_t len) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) {
    const C w0 = w[r], w1 = w[r + 1], w2 = w[r + 2], w3 = w[r + 3];
    const C *r0 = rows + r * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
    for (int64_t x = 0; x < len; ++x) acc[x] += w0 * r0[x] + w1 * r1[x] + w2 * r2[x] + w3 * r3[x];
  }
  for (; r < count; ++r) {
    const C wr = w[r];
    const C* rr = rows + r * ld;
    for (int64_t x = 0; x < len; ++x) acc[x] += wr * rr[x];
  }
}

// s[0, n) = (scaled q row) . k_j with kt the keys transposed [E, ldk].
template <class C>
void scores(C* s, const C* qs, const C* kt, int64_t ldk, int64_t E, int64_t n) {
  std::fill(s, s + n, C(0));
  add_rows(s, qs, kt, ldk, E, n);
}

// The inverse keep probability for weight (bh, i, j) under dropout, or 0 when it is dropped.
struct Dropout {
  bool on = false;
  uint64_t seed = 0, threshold = 0;
  double inv_keep = 1.0;
  explicit Dropout(const AttentionArgs& a)
      : on(a.dropout_p > 0.0),
        seed(a.seed),
        threshold(static_cast<uint64_t>(a.dropout_p * 0x1.0p53)),
        inv_keep(1.0 / (1.0 - a.dropout_p)) {}
  template <class C>
  C factor(uint64_t index) const {
    return (splitmix64(seed + index) >> 11) >= threshold ? static_cast<C>(inv_keep) : C(0);
  }
};

template <class T, class C>
void forward_typed(const Tensor& out, const Tensor& lse_t, const AttentionArgs& a) {
  const int64_t B = a.q.size(0), H = a.q.size(1), L = a.q.size(2), E = a.q.size(3), S = a.k.size(2), Ev = a.v.size(3);
  const T* q = static_cast<const T*>(a.q.raw_data());
  const T* k = static_cast<const T*>(a.k.raw_data());
  const T* v = static_cast<const T*>(a.v.raw_data());
  T* o = static_cast<T*>(out.raw_data());
  C* lse = static_cast<C*>(lse_t.raw_data());
  const MaskRows mr(a.mask, H);
  const Dropout drop(a);
  const C scale = static_cast<C>(a.scale);
  const int64_t blocks = (L + kRowBlock - 1) / kRowBlock;
  parallel_for(B * H * blocks, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<C> kf, kt, vf, qs, s, acc;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / blocks, i0 = (t % blocks) * kRowBlock, i1 = std::min(L, i0 + kRowBlock);
      const int64_t jmax = a.causal ? std::min(S, i1) : S;  // keys any row of the block can see
      kf.resize(static_cast<size_t>(jmax * E));
      kt.resize(static_cast<size_t>(E * jmax));
      qs.resize(static_cast<size_t>(E));
      s.resize(static_cast<size_t>(jmax));
      acc.resize(static_cast<size_t>(Ev));
      // 16-bit K and V widened in bulk (convert.h), then K transposed in C.
      load_run(k + bh * S * E, kf.data(), jmax * E);
      for (int64_t j = 0; j < jmax; ++j)
        for (int64_t e = 0; e < E; ++e) kt[static_cast<size_t>(e * jmax + j)] = kf[static_cast<size_t>(j * E + e)];
      const C* vb;
      if constexpr (std::is_same_v<T, C>) {
        vb = v + bh * S * Ev;
      } else {
        vf.resize(static_cast<size_t>(jmax * Ev));
        load_run(v + bh * S * Ev, vf.data(), jmax * Ev);
        vb = vf.data();
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t n = a.causal ? std::min(S, i + 1) : S;
        load_run(q + (bh * L + i) * E, qs.data(), E);
        for (C& x : qs) x *= scale;
        C* sr = s.data();
        scores(sr, qs.data(), kt.data(), jmax, E, n);
        apply_mask(mr, bh, i, sr, n);
        C mx = -std::numeric_limits<C>::infinity();
        for (int64_t j = 0; j < n; ++j) mx = (sr[j] > mx || sr[j] != sr[j]) ? sr[j] : mx;
        T* orow = o + (bh / H) * out.stride(0) + (bh % H) * out.stride(1) + i * out.stride(2);  // Ev contiguous
        if (mx == -std::numeric_limits<C>::infinity()) {  // every key masked (or none): zeros
          for (int64_t c = 0; c < Ev; ++c) orow[c] = T(0);
          lse[bh * L + i] = mx;
          continue;
        }
        const C sum = exp_shifted(sr, mx, n);
        lse[bh * L + i] = mx + std::log(sum);
        const C inv = C(1) / sum;
        if (drop.on) {
          const uint64_t base = static_cast<uint64_t>((bh * L + i) * S);
          for (int64_t j = 0; j < n; ++j) sr[j] *= inv * drop.factor<C>(base + static_cast<uint64_t>(j));
        } else {
          for (int64_t j = 0; j < n; ++j) sr[j] *= inv;
        }
        std::fill(acc.begin(), acc.end(), C(0));
        C* ac = acc.data();
        add_rows(ac, sr, vb, Ev, n, Ev);
        store_run(ac, orow, Ev);
      }
    }
  });
}

template <class T, class C>
void backward_typed(const Tensor& gq_t, const Tensor& gk_t, const Tensor& gv_t, const Tensor& gm_t, const Tensor& go_t,
                    const Tensor& o_t, const Tensor& lse_t, const AttentionArgs& a) {
  const int64_t B = a.q.size(0), H = a.q.size(1), L = a.q.size(2), E = a.q.size(3), S = a.k.size(2), Ev = a.v.size(3);
  const T* q = static_cast<const T*>(a.q.raw_data());
  const T* k = static_cast<const T*>(a.k.raw_data());
  const T* v = static_cast<const T*>(a.v.raw_data());
  const T* go = static_cast<const T*>(go_t.raw_data());
  const T* o = static_cast<const T*>(o_t.raw_data());
  const C* lse = static_cast<const C*>(lse_t.raw_data());
  T* gq = static_cast<T*>(gq_t.raw_data());
  T* gk = static_cast<T*>(gk_t.raw_data());
  T* gv = static_cast<T*>(gv_t.raw_data());
  C* gm = gm_t.defined() ? static_cast<C*>(gm_t.raw_data()) : nullptr;
  const MaskRows mr(a.mask, H);
  const Dropout drop(a);
  const C scale = static_cast<C>(a.scale);
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<C> kt, kf, vf, vt, dk, dv, qs, gf, of, s, dp, dq;
    for (int64_t bh = t0; bh < t1; ++bh) {
      kt.resize(static_cast<size_t>(E * S));
      kf.resize(static_cast<size_t>(S * E));
      vf.resize(static_cast<size_t>(S * Ev));
      vt.resize(static_cast<size_t>(Ev * S));
      dk.assign(static_cast<size_t>(S * E), C(0));
      dv.assign(static_cast<size_t>(S * Ev), C(0));
      qs.resize(static_cast<size_t>(E));
      dq.resize(static_cast<size_t>(E));
      gf.resize(static_cast<size_t>(Ev));
      of.resize(static_cast<size_t>(Ev));
      s.resize(static_cast<size_t>(S));
      dp.resize(static_cast<size_t>(S));
      load_run(k + bh * S * E, kf.data(), S * E);  // widened in bulk, then transposed in C
      load_run(v + bh * S * Ev, vf.data(), S * Ev);
      for (int64_t j = 0; j < S; ++j) {
        for (int64_t e = 0; e < E; ++e) kt[static_cast<size_t>(e * S + j)] = kf[static_cast<size_t>(j * E + e)];
        for (int64_t c = 0; c < Ev; ++c) vt[static_cast<size_t>(c * S + j)] = vf[static_cast<size_t>(j * Ev + c)];
      }
      for (int64_t i = 0; i < L; ++i) {
        const int64_t n = a.causal ? std::min(S, i + 1) : S;
        const int64_t row = bh * L + i;
        const C l = lse[row];
        T* gqr = gq + row * E;
        C* gmr = gm ? gm + row * S : nullptr;
        if (gmr) std::fill(gmr, gmr + S, C(0));
        if (l == -std::numeric_limits<C>::infinity()) {  // a fully masked row: zeros out, no gradient
          for (int64_t e = 0; e < E; ++e) gqr[e] = T(0);
          continue;
        }
        load_run(q + row * E, qs.data(), E);
        for (C& x : qs) x *= scale;
        C* sr = s.data();
        scores(sr, qs.data(), kt.data(), S, E, n);
        apply_mask(mr, bh, i, sr, n);
        exp_shifted(sr, l, n);  // the weights p
        C D = 0;                // dO . O = sum_j dP_j p_j (dropout included)
        load_run(go + row * Ev, gf.data(), Ev);
        load_run(o + row * Ev, of.data(), Ev);
        for (int64_t c = 0; c < Ev; ++c) D += gf[static_cast<size_t>(c)] * of[static_cast<size_t>(c)];
        C* dpr = dp.data();
        std::fill(dpr, dpr + n, C(0));
        add_rows(dpr, gf.data(), vt.data(), S, Ev, n);
        const uint64_t base = static_cast<uint64_t>(row * S);
        for (int64_t j = 0; j < n; ++j) {
          const C z = drop.on ? drop.factor<C>(base + static_cast<uint64_t>(j)) : C(1);
          const C pz = sr[j] * z;
          C* __restrict dvr = dv.data() + j * Ev;
          const C* __restrict g = gf.data();
          for (int64_t c = 0; c < Ev; ++c) dvr[c] += pz * g[c];
          sr[j] = sr[j] * (dpr[j] * z - D);  // dL/dscore
        }
        if (gmr) std::copy(sr, sr + n, gmr);
        std::fill(dq.begin(), dq.end(), C(0));
        add_rows(dq.data(), sr, kf.data(), E, n, E);
        for (int64_t j = 0; j < n; ++j) {
          const C ds = sr[j];
          C* __restrict dkr = dk.data() + j * E;
          const C* __restrict qv = qs.data();
          for (int64_t e = 0; e < E; ++e) dkr[e] += ds * qv[e];  // d(scaled score)/dk = scale q
        }
        for (C& x : dq) x *= scale;
        store_run(dq.data(), gqr, E);
      }
      store_run(dk.data(), gk + bh * S * E, S * E);
      store_run(dv.data(), gv + bh * S * Ev, S * Ev);
    }
  });
}

// These kernels read q, k, v (and the backward's out) contiguous; the op passes them with their
// own strides.
AttentionArgs contiguous_cpu_args(const AttentionArgs& in) {
  AttentionArgs a = in;
  a.q = internal::contiguous(in.q);
  a.k = internal::contiguous(in.k);
  a.v = internal::contiguous(in.v);
  return a;
}

void attention_cpu(const Tensor& out, const Tensor& lse, const AttentionArgs& args) {
  if (out.size(3) > 1 && out.stride(3) != 1) {  // the forward writes rows of Ev contiguous values
    const Tensor dense = empty(out.shape(), TensorOptions(out.dtype()));
    attention_cpu(dense, lse, args);
    copy_stub(kCPU, out, dense);
    return;
  }
  const AttentionArgs a = contiguous_cpu_args(args);
  dispatch_float(a.q.dtype(), [&]<class T>(TypeTag<T>) {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    forward_typed<T, C>(out, lse, a);
  });
}

void attention_backward_cpu(const Tensor& gq, const Tensor& gk, const Tensor& gv, const Tensor& gm, const Tensor& go,
                            const Tensor& o_in, const Tensor& lse, const AttentionArgs& args) {
  const AttentionArgs a = contiguous_cpu_args(args);
  const Tensor o = internal::contiguous(o_in);
  dispatch_float(a.q.dtype(), [&]<class T>(TypeTag<T>) {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    backward_typed<T, C>(gq, gk, gv, gm, go, o, lse, a);
  });
}

}  // namespace

HG_REGISTER_KERNEL(attention_stub, kCPU, attention_cpu);
HG_REGISTER_KERNEL(attention_backward_stub, kCPU, attention_backward_cpu);

}  // namespace hg::cpu
