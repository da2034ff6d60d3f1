// scaled_dot_product_attention: argument checks, the mask's broadcast view, and the backward that
// recomputes the weights from q, k and the saved log-sum-exp (as flash attention does).
#include <cmath>

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/attention_kernels.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/internal.h"
#include "framework/ops/matmul.h"
#include "framework/ops/reduce.h"
#include "framework/ops/softmax.h"
#include "framework/ops/triangular.h"

namespace hg {

HG_DEFINE_STUB(attention_stub, AttentionFn);
HG_DEFINE_STUB(attention_backward_stub, AttentionBackwardFn);

namespace {
constexpr const char* kName = "scaled_dot_product_attention";
const OpDef kAttention{"scaled_dot_product_attention", true};
const OpDef kAttentionBackward{"scaled_dot_product_attention_backward", false};

void check_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  HG_CHECK(q.defined() && k.defined() && v.defined(), kName, "got an undefined query, key or value");
  HG_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kName,
           "expected 4-d query [B, H, L, E], key [B, H, S, E] and value [B, H, S, Ev], got shapes {}, {} and {}",
           q.shape(), k.shape(), v.shape());
  HG_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), kName,
           "query, key and value must share one floating dtype, got {}, {} and {}", q.dtype(), k.dtype(), v.dtype());
  HG_CHECK(q.device() == k.device() && q.device() == v.device(), kName,
           "query, key and value must be on one device, got {}, {} and {}", q.device(), k.device(), v.device());
  HG_CHECK(q.size(0) == k.size(0) && q.size(0) == v.size(0), kName,
           "batch sizes differ: query {}, key {}, value {} (shapes {}, {}, {})", q.size(0), k.size(0), v.size(0),
           q.shape(), k.shape(), v.shape());
  HG_CHECK(q.size(1) == k.size(1) && q.size(1) == v.size(1), kName,
           "head counts differ: query {}, key {}, value {} (shapes {}, {}, {})", q.size(1), k.size(1), v.size(1),
           q.shape(), k.shape(), v.shape());
  HG_CHECK(q.size(3) == k.size(3), kName, "query and key embedding dims differ: {} vs {} (shapes {} and {})", q.size(3),
           k.size(3), q.shape(), k.shape());
  HG_CHECK(k.size(2) == v.size(2), kName, "key and value sequence lengths differ: {} vs {} (shapes {} and {})",
           k.size(2), v.size(2), k.shape(), v.shape());
}
// Under create_graph: the gradients of attention written in public ops (the scores recomputed),
// so they can be differentiated again. P = softmax(q k^T scale + mask), o = P v:
// dv = P^T do, dP = do v^T, dS = P (dP - rowsum(dP P)), dq = dS k scale, dk = dS^T q scale, and
// dS itself for a floating mask.
TensorList attention_grads_recorded(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool is_causal, double scale, bool mask_grad, Dtype cdt) {
  const Tensor qc = q.to(cdt), kc = k.to(cdt), vc = v.to(cdt), go = g.to(cdt);
  Tensor scores = matmul(qc, kc.transpose(-2, -1)) * scale;
  const int64_t L = q.size(2), S = k.size(2);
  const TensorOptions opt = TensorOptions(cdt).device(q.device());
  const Tensor minus_inf = scalar_tensor(-INFINITY, opt);
  if (is_causal) {
    scores = where(tril(ones({L, S}, opt)) > 0.5, scores, minus_inf);
  } else if (mask.defined() && mask.dtype() == kBool) {
    scores = where(mask, scores, minus_inf);
  } else if (mask.defined()) {
    scores = scores + mask.to(cdt);
  }
  const Tensor p = softmax(scores, -1);
  const Tensor dv = matmul(p.transpose(-2, -1), go);
  const Tensor dp = matmul(go, vc.transpose(-2, -1));
  const Tensor ds = p * (dp - sum(dp * p, {-1}, true));
  const Tensor dq = matmul(ds, kc) * scale, dk = matmul(ds.transpose(-2, -1), qc) * scale;
  return {dq.to(q.dtype()), dk.to(k.dtype()), dv.to(v.dtype()), mask_grad ? ds : Tensor()};
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask_in,
                                    double dropout_p, bool is_causal, std::optional<double> scale_in) {
  OpCall call(kAttention, {q_in, k_in, v_in, mask_in});
  const Tensor &q = call.input(0), &k = call.input(1), &v = call.input(2), &mask = call.input(3);
  check_qkv(q, k, v);
  HG_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kName, "dropout_p must be in [0, 1), got {}", dropout_p);
  HG_CHECK(!(is_causal && mask.defined()), kName, "is_causal and an explicit attn_mask exclude each other");
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), S = k.size(2), Ev = v.size(3);
  const double scale = scale_in.value_or(E > 0 ? 1.0 / std::sqrt(static_cast<double>(E)) : 1.0);
  HG_CHECK(std::isfinite(scale), kName, "scale must be finite, got {}", scale);
  const Dtype cdt = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Shape full{B, H, L, S};
  AttentionArgs args;
  args.scale = scale;
  args.causal = is_causal;
  args.dropout_p = dropout_p;
  if (mask.defined()) {
    HG_CHECK(mask.dtype() == kBool || is_floating(mask.dtype()), kName,
             "attn_mask must be bool (true = attend) or floating (added to the scores), got {}", mask.dtype());
    HG_CHECK(mask.device() == q.device(), kName, "attn_mask is on {} but the query is on {}", mask.device(),
             q.device());
    bool ok = mask.dim() <= 4;
    for (int64_t d = 0; ok && d < mask.dim(); ++d) {
      const int64_t m = mask.size(d), t = full[static_cast<size_t>(4 - mask.dim() + d)];
      ok = m == t || m == 1;
    }
    HG_CHECK(ok, kName, "attn_mask of shape {} does not broadcast to [B, H, L, S] = {}", mask.shape(), full);
    args.mask = internal::expanded(mask.dtype() == kBool ? mask : internal::cast(mask, cdt), full);
  }
  args.q = q;  // read in place by kernels that take strides, copied by those that do not
  args.k = k;
  args.v = v;
  if (dropout_p > 0.0) args.seed = random_u64();  // drawn even for empty tensors, as dropout does
  const TensorOptions opt = TensorOptions(q.dtype()).device(q.device());
  // The output's memory is [B, L, H, Ev], as PyTorch's flash attention lays it out: merging the
  // heads afterwards (transpose(1, 2) and reshape to [B, L, H Ev]) is then a view, not a copy.
  Tensor out = internal::alias(empty({B, L, H, Ev}, opt), {B, H, L, Ev}, {L * H * Ev, Ev, H * Ev, 1}, 0);
  Tensor lse = empty({B, H, L}, TensorOptions(cdt).device(q.device()));
  if (out.numel()) attention_stub(q.device().type, out, lse, args);
  BackwardFn bw;
  if (call.needs_grad()) {
    const bool mask_grad = mask.defined() && mask.dtype() != kBool && mask.requires_grad();
    bw = [sq = SavedTensor(q, kName), sk = SavedTensor(k, kName), sv = SavedTensor(v, kName),
          so = SavedTensor(out, kName), smi = SavedTensor(mask, kName), lse, mask = args.mask, scale, is_causal,
          dropout_p, seed = args.seed, mask_grad, cdt](const TensorList& g) -> TensorList {
      if (!g[0].defined()) return {Tensor(), Tensor(), Tensor(), Tensor()};
      if (GradMode::is_enabled()) {  // create_graph
        HG_CHECK(dropout_p == 0.0, kName,
                 "double backward with dropout_p > 0 is not supported (the dropout mask lives in the fused kernel); "
                 "use dropout_p = 0 or write the attention out with matmul, softmax and dropout");
        return attention_grads_recorded(g[0], sq.get(), sk.get(), sv.get(), smi.get(), is_causal, scale, mask_grad,
                                        cdt);
      }
      AttentionArgs a;
      a.q = sq.get();
      a.k = sk.get();
      a.v = sv.get();
      a.mask = mask;
      a.scale = scale;
      a.causal = is_causal;
      a.dropout_p = dropout_p;
      a.seed = seed;
      const Tensor& o = so.get();
      OpCall bcall(kAttentionBackward, {g[0], a.q, a.k, a.v, o});
      const Tensor go = internal::contiguous(internal::cast(bcall.input(0), o.dtype()));
      Tensor gq = empty_like(a.q), gk = empty_like(a.k), gv = empty_like(a.v);
      Tensor gm =
          mask_grad ? empty({a.q.size(0), a.q.size(1), a.q.size(2), a.k.size(2)}, TensorOptions(cdt).device(o.device()))
                    : Tensor();
      attention_backward_stub(o.device().type, gq, gk, gv, gm, go, o, lse, a);
      bcall.finish({&gq, &gk, &gv, &gm});
      return {gq, gk, gv, gm};  // the engine sums gm over the mask's broadcast dims
    };
  }
  call.finish({&out}, std::move(bw));
  return out;
}

}  // namespace hg
