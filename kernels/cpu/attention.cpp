// CPU scaled-dot-product attention, blocked as flash attention is, with the block products on the
// CPU GEMM (kernels/cpu/gemm/blas.h) in the compute dtype (float32, float64 for float64 inputs).
// Forward: per (b, h) and a block of query rows, the block's scores S = q k^T are one product, each
// row is masked and turned into weights (max-subtracted softmax, its log-sum-exp kept), and
// out = P v a second product. Backward: per (b, h), each block recomputes its weights from q, k and
// the saved log-sum-exp, then dv += P^T dO, dP = dO v^T, dS = P (dP - dO.out), dq = dS k and
// dk += dS^T q, all products. A causal block stops at the last key its last row sees, so the
// products cover about half of the full [L, S] square. Only a block's scores are ever held
// (kRowBlock x S), never [L, S]. The row loops (mask, softmax, dS) run along keys and vectorise.
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
#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/vec_math.h"

namespace hg::cpu {
namespace {

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

// Query rows per block: the scores of a block are [64, S] (256 KiB at S = 1024 in float32), and 64
// rows make the block products large enough for the GEMM's register tiles.
constexpr int64_t kRowBlock = 64;

// C[m, n] = op(A) op(B) (or += when `accumulate`), row-major, on the calling thread's share of the
// CPU GEMM; empty products write zeros (or leave C) without calling it.
template <class C>
void block_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const C* a, int64_t lda, const C* b, int64_t ldb,
                   C* c, int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, C(0));
    return;
  }
  gemm<C>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

// The [rows, len] block of a contiguous [.., len] tensor starting at row `first`, in C: the data
// itself when T is C, else widened into `scratch`.
template <class T, class C>
const C* rows_in(const T* base, int64_t first, int64_t rows, int64_t len, std::vector<C>& scratch) {
  if constexpr (std::is_same_v<T, C>) {
    return base + first * len;
  } else {
    scratch.resize(static_cast<size_t>(rows * len));
    load_run(base + first * len, scratch.data(), rows * len);
    return scratch.data();
  }
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

// The scaled query rows [rows, E] of (bh, first..first + rows), in C.
template <class T, class C>
void scaled_queries(const T* q, int64_t bh, int64_t L, int64_t first, int64_t rows, int64_t E, C scale,
                    std::vector<C>& qs) {
  qs.resize(static_cast<size_t>(rows * E));
  load_run(q + (bh * L + first) * E, qs.data(), rows * E);
  for (C& x : qs) x *= scale;
}

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
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  const int64_t blocks = (L + kRowBlock - 1) / kRowBlock;
  parallel_for(B * H * blocks, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<C> kf, vf, qs, p, acc;
    thread_local std::vector<char> dead;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / blocks, i0 = (t % blocks) * kRowBlock, rows = std::min(L, i0 + kRowBlock) - i0;
      const int64_t jmax = a.causal ? std::min(S, i0 + rows) : S;  // keys any row of the block can see
      const C* kb = rows_in<T, C>(k + bh * S * E, 0, jmax, E, kf);
      const C* vb = rows_in<T, C>(v + bh * S * Ev, 0, jmax, Ev, vf);
      scaled_queries<T, C>(q, bh, L, i0, rows, E, scale, qs);
      p.resize(static_cast<size_t>(rows * jmax));
      dead.assign(static_cast<size_t>(rows), 0);
      block_product<C>(false, true, rows, jmax, E, qs.data(), E, kb, E, p.data(), jmax, false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r, n = a.causal ? std::min(S, i + 1) : S;
        C* sr = p.data() + r * jmax;
        apply_mask(mr, bh, i, sr, n);
        const C mx = row_max<C>(sr, n, std::integral_constant<int64_t, 1>{});
        std::fill(sr + n, sr + jmax, C(0));  // keys a causal row does not see
        if (mx == kNegInf) {                 // every key masked (or none): zeros out, lse -inf
          std::fill(sr, sr + n, C(0));
          dead[static_cast<size_t>(r)] = 1;
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
      }
      acc.resize(static_cast<size_t>(rows * Ev));
      block_product<C>(false, false, rows, Ev, jmax, p.data(), jmax, vb, Ev, acc.data(), Ev, false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        T* orow = o + (bh / H) * out.stride(0) + (bh % H) * out.stride(1) + i * out.stride(2);  // Ev contiguous
        C* ar = acc.data() + r * Ev;
        if (dead[static_cast<size_t>(r)]) std::fill(ar, ar + Ev, C(0));  // zeros even where v is not finite
        store_run(ar, orow, Ev);
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
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  parallel_for(B * H, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<C> kf, vf, dk, dv, qs, gf, of, d, p, dp, dq;
    for (int64_t bh = t0; bh < t1; ++bh) {
      const C* kb = rows_in<T, C>(k + bh * S * E, 0, S, E, kf);
      const C* vb = rows_in<T, C>(v + bh * S * Ev, 0, S, Ev, vf);
      dk.assign(static_cast<size_t>(S * E), C(0));
      dv.assign(static_cast<size_t>(S * Ev), C(0));
      for (int64_t i0 = 0; i0 < L; i0 += kRowBlock) {
        const int64_t rows = std::min(L, i0 + kRowBlock) - i0;
        const int64_t jmax = a.causal ? std::min(S, i0 + rows) : S;
        scaled_queries<T, C>(q, bh, L, i0, rows, E, scale, qs);
        gf.resize(static_cast<size_t>(rows * Ev));
        of.resize(static_cast<size_t>(rows * Ev));
        load_run(go + (bh * L + i0) * Ev, gf.data(), rows * Ev);
        load_run(o + (bh * L + i0) * Ev, of.data(), rows * Ev);
        d.resize(static_cast<size_t>(rows));  // dO . O = sum_j dP_j p_j per row (dropout included)
        for (int64_t r = 0; r < rows; ++r) {
          C dr = 0;
          for (int64_t c = 0; c < Ev; ++c)
            dr += gf[static_cast<size_t>(r * Ev + c)] * of[static_cast<size_t>(r * Ev + c)];
          d[static_cast<size_t>(r)] = dr;
        }
        p.resize(static_cast<size_t>(rows * jmax));
        dp.resize(static_cast<size_t>(rows * jmax));
        block_product<C>(false, true, rows, jmax, E, qs.data(), E, kb, E, p.data(), jmax, false);
        block_product<C>(false, true, rows, jmax, Ev, gf.data(), Ev, vb, Ev, dp.data(), jmax, false);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r, n = a.causal ? std::min(S, i + 1) : S, row = bh * L + i;
          C* pr = p.data() + r * jmax;    // the weights (times the dropout factor): dv's left operand
          C* dsr = dp.data() + r * jmax;  // dP, then dL/dscore: dq's and dk's left operand
          const C l = lse[row];
          if (l == kNegInf) {  // a fully masked row: zeros out, no gradient
            std::fill(pr, pr + jmax, C(0));
            std::fill(dsr, dsr + jmax, C(0));
          } else {
            apply_mask(mr, bh, i, pr, n);
            exp_shifted(pr, l, n);
            const C dr = d[static_cast<size_t>(r)];
            const uint64_t base = static_cast<uint64_t>(row * S);
            if (drop.on) {
              for (int64_t j = 0; j < n; ++j) {
                const C z = drop.factor<C>(base + static_cast<uint64_t>(j));
                dsr[j] = pr[j] * (dsr[j] * z - dr);
                pr[j] *= z;
              }
            } else {
              for (int64_t j = 0; j < n; ++j) dsr[j] = pr[j] * (dsr[j] - dr);
            }
            std::fill(pr + n, pr + jmax, C(0));
            std::fill(dsr + n, dsr + jmax, C(0));
          }
          if (gm) {
            C* gmr = gm + row * S;
            std::copy(dsr, dsr + jmax, gmr);
            std::fill(gmr + jmax, gmr + S, C(0));
          }
        }
        block_product<C>(true, false, jmax, Ev, rows, p.data(), jmax, gf.data(), Ev, dv.data(), Ev, true);
        block_product<C>(true, false, jmax, E, rows, dp.data(), jmax, qs.data(), E, dk.data(), E, true);
        dq.resize(static_cast<size_t>(rows * E));
        block_product<C>(false, false, rows, E, jmax, dp.data(), jmax, kb, E, dq.data(), E, false);
        for (C& x : dq) x *= scale;  // d(scaled score)/dq = scale k
        store_run(dq.data(), gq + (bh * L + i0) * E, rows * E);
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
