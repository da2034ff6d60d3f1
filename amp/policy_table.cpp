// THE autocast policy table (docs/AMP.md section 2): one row per op name, for cpu and
// cuda. It matches hg::op_registry() both ways: every op has a row, "pass-through" ones included,
// and every row names a registered op (policy_table_problems(), checked by a registry test).
//
//   Lower    eligible inputs -> the region's float16/bfloat16
//   F32      eligible inputs -> float32
//   F32Out   no input copy; output float32 when the first input is eligible
//   Promote  eligible inputs -> the widest floating dtype among them (float16 + bfloat16: error)
//   Refuse   throws with the note as advice
//   Pass     not listed: runs in its inputs' dtypes (in-place ops, views, elementwise, ...)
#include "amp/policy.h"

#include <set>
#include <string>
#include <unordered_map>

#include "framework/error.h"
#include "framework/op.h"

namespace hg::amp {

namespace {
constexpr CastPolicy Lower = CastPolicy::LowerPrecision;
constexpr CastPolicy F32 = CastPolicy::Fp32;
constexpr CastPolicy F32Out = CastPolicy::Fp32OutputDtype;
constexpr CastPolicy Promote = CastPolicy::Promote;
constexpr CastPolicy Refuse = CastPolicy::Refused;
constexpr CastPolicy Pass = CastPolicy::PassThrough;

// clang-format off
constexpr PolicyRow kTable[] = {
  // op                                  cpu      cuda     note
  // -- copies and in-place writes: run as asked --
  {"to",                                 Pass,    Pass,    "the cast itself"},
  {"contiguous",                         Pass,    Pass,    "copy, keeps dtype"},
  {"clone",                              Pass,    Pass,    "copy, keeps dtype"},
  {"copy_",                              Pass,    Pass,    "in-place"},
  {"fill_",                              Pass,    Pass,    "in-place"},
  {"zero_",                              Pass,    Pass,    "in-place"},
  {"add_",                               Pass,    Pass,    "in-place"},
  {"sub_",                               Pass,    Pass,    "in-place"},
  {"mul_",                               Pass,    Pass,    "in-place"},
  {"div_",                               Pass,    Pass,    "in-place"},
  {"relu_",                              Pass,    Pass,    "in-place"},
  {"clamp_",                             Pass,    Pass,    "in-place"},
  {"masked_fill_",                       Pass,    Pass,    "in-place"},
  {"amp_unscale_",                       Pass,    Pass,    "GradScaler kernel, in-place on fp32 grads"},
  {"amp_find_non_finite",                Pass,    Pass,    "GradScaler kernel, reads fp32 grads"},
  {"amp_update_scale_",                  Pass,    Pass,    "GradScaler kernel, in-place on its state"},
  // -- views --
  {"view",                               Pass,    Pass,    "view"},
  {"reshape",                            Pass,    Pass,    "view (or copy)"},
  {"transpose",                          Pass,    Pass,    "view"},
  {"permute",                            Pass,    Pass,    "view"},
  {"slice",                              Pass,    Pass,    "view"},
  {"select",                             Pass,    Pass,    "view"},
  {"expand",                             Pass,    Pass,    "view"},
  {"squeeze",                            Pass,    Pass,    "view"},
  {"unsqueeze",                          Pass,    Pass,    "view"},
  {"as_strided",                         Pass,    Pass,    "view"},
  // -- elementwise binary: normal type promotion --
  {"add",                                Pass,    Pass,    "binary, promotes by normal rules"},
  {"sub",                                Pass,    Pass,    "binary, promotes by normal rules"},
  {"mul",                                Pass,    Pass,    "binary, promotes by normal rules"},
  {"div",                                Pass,    Pass,    "binary, promotes by normal rules"},
  {"maximum",                            Pass,    Pass,    "binary, promotes by normal rules"},
  {"minimum",                            Pass,    Pass,    "binary, promotes by normal rules"},
  {"eq",                                 Pass,    Pass,    "comparison"},
  {"ne",                                 Pass,    Pass,    "comparison"},
  {"lt",                                 Pass,    Pass,    "comparison"},
  {"le",                                 Pass,    Pass,    "comparison"},
  {"gt",                                 Pass,    Pass,    "comparison"},
  {"ge",                                 Pass,    Pass,    "comparison"},
  {"where",                              Pass,    Pass,    "selection"},
  {"masked_fill",                        Pass,    Pass,    "selection"},
  // -- elementwise unary --
  {"neg",                                Pass,    Pass,    "exact in any dtype"},
  {"abs",                                Pass,    Pass,    "exact in any dtype"},
  {"relu",                               Pass,    Pass,    "exact in any dtype"},
  {"clamp",                              Pass,    Pass,    "exact in any dtype"},
  {"sqrt",                               Pass,    Pass,    "not listed"},
  {"sigmoid",                            Pass,    Pass,    "not listed: bounded output"},
  {"tanh",                               Pass,    Pass,    "not listed: bounded output"},
  {"gelu",                               Pass,    Pass,    "not listed"},
  {"erf",                                Pass,    Pass,    "not listed (erfinv would be fp32)"},
  {"leaky_relu",                         Pass,    Pass,    "not listed"},
  {"elu",                                Pass,    Pass,    "not listed"},
  {"selu",                               Pass,    Pass,    "not listed"},
  {"mish",                               Pass,    Pass,    "not listed"},
  {"hardswish",                          Pass,    Pass,    "not listed"},
  {"exp",                                Pass,    F32,     "cuda: overflows float16 quickly"},
  {"log",                                Pass,    F32,     "cuda: needs float32 range near 0"},
  {"log1p",                              Pass,    F32,     "cuda: needs float32 precision near 0"},
  {"rsqrt",                              Pass,    F32,     "cuda: overflows float16 near 0"},
  {"reciprocal",                         Pass,    F32,     "cuda: overflows float16 near 0"},
  {"pow",                                Pass,    F32,     "cuda: overflows float16"},
  {"softplus",                           Pass,    F32,     "cuda: contains exp"},
  {"dropout",                            Pass,    Pass,    "not listed"},
  // -- reductions --
  {"sum",                                Pass,    F32Out,  "cuda: accumulates into float32"},
  {"max",                                Pass,    Pass,    "exact in any dtype"},
  {"min",                                Pass,    Pass,    "exact in any dtype"},
  {"argmax",                             Pass,    Pass,    "integer output"},
  {"argmin",                             Pass,    Pass,    "integer output"},
  {"var",                                Pass,    Pass,    "not listed: the kernel accumulates in float32 or wider"},
  {"norm",                               Pass,    F32Out,  "cuda: vector norms write float32"},
  {"cumsum",                             Pass,    F32Out,  "cuda: running sums write float32"},
  {"sort",                               Pass,    Pass,    "exact in any dtype"},
  {"topk",                               Pass,    Pass,    "exact in any dtype"},
  {"logsumexp",                          Pass,    F32,     "cuda: exp and a sum (PyTorch's fp32 list)"},
  // -- matrix products and convolutions: the lower-precision family --
  {"mm",                                 Lower,   Lower,   "GEMM"},
  {"bmm",                                Lower,   Lower,   "GEMM"},
  {"linear",                             Lower,   Lower,   "GEMM"},
  {"linear_gelu_linear",                 Lower,   Lower,   "two GEMMs around a GELU, as linear"},
  {"conv2d",                             Lower,   Lower,   "convolution"},
  {"conv2d_relu",                        Lower,   Lower,   "convolution + ReLU in one op"},
  {"conv2d_relu_max_pool2d",             Lower,   Lower,   "convolution + ReLU + 2x2 max pool in one op"},
  {"conv_transpose2d",                   Lower,   Lower,   "convolution (PyTorch 1.13's CPU table had it in fp32; 2.x lower)"},
  {"scaled_dot_product_attention",       Lower,   Lower,   "two GEMMs around a softmax kept in float32 inside"},
  {"lstm_recurrence",                    Lower,   Lower,   "h W_hh^T per step (PyTorch: lstm_cell, _cudnn_rnn; 1.13's CPU kept lstm in fp32)"},
  {"lstm_projected_recurrence",          Lower,   Lower,   "h W_hh^T and (o tanh c) W_hr^T per step (PyTorch: _cudnn_rnn with proj_size)"},
  {"gru_recurrence",                     Lower,   Lower,   "h W_hh^T per step (PyTorch: gru_cell, _cudnn_rnn; 1.13's CPU kept gru in fp32)"},
  {"rnn_recurrence",                     Lower,   Lower,   "h W_hh^T per step (PyTorch: rnn_tanh_cell, rnn_relu_cell, _cudnn_rnn)"},
  {"fp8_gemm",                           Pass,    Pass,    "an fp8 region's linear/mm (amp/fp8_autocast.h): casts its inputs itself, with the recipe's scales"},
  {"fp8_fallback",                       Pass,    Pass,    "marks a linear/mm an fp8 region ran in bfloat16 (shapes or a GPU fp8 cannot take)"},
  {"fp8_cast_transpose",                 Pass,    Pass,    "an fp8 GEMM's operand cast (amp/fp8_ops.h): scaled, saturated, given its fp8 dtype"},
  {"fp8_gemm_tn",                        Pass,    Pass,    "the device fp8 GEMM of two fp8 operands (amp/fp8_ops.h): its dtypes are given"},
  // -- softmax and normalisation --
  {"softmax",                            Pass,    F32Out,  "cuda: exp and a sum; float32 output"},
  {"log_softmax",                        Pass,    F32Out,  "cuda: exp and a sum; float32 output"},
  {"layer_norm",                         Pass,    F32,     "cuda: mean/variance need float32"},
  {"add_layer_norm",                     Pass,    Pass,
   "the sum in its inputs' dtype (the residual stream), statistics in float32 inside; in a region the normalised "
   "output is written in the region's dtype, which its consumer (a linear) would cast it to"},
  {"batch_norm",                         Pass,    Pass,    "not listed: kernels keep float32 statistics"},
  {"batch_norm_add_relu",                Pass,    Pass,    "batch_norm's, with the add and ReLU in its dtype"},
  {"rms_norm",                           Pass,    Pass,    "not listed: statistics in float32 inside, output in the input's dtype"},
  // -- losses: float32 on both --
  {"cross_entropy",                      F32,     F32Out,
   "cuda: float32 inside, the logits read in their dtype (no float32 copy): the same loss and gradient as F32"},
  {"cross_entropy_fused_",               Pass,    Pass,    "loss in float32 inside; its gradient written over the logits in their dtype"},
  {"nll_loss",                           F32,     F32,     "loss"},
  {"mse_loss",                           F32,     F32,     "loss"},
  {"l1_loss",                            F32,     F32,     "loss"},
  {"smooth_l1_loss",                     F32,     F32,     "loss"},
  {"huber_loss",                         F32,     F32,     "loss"},
  {"kl_div",                             F32,     F32,     "loss"},
  {"binary_cross_entropy_with_logits",   F32,     F32,     "loss"},
  {"binary_cross_entropy",               F32,     Refuse,
   "binary_cross_entropy on probabilities is unsafe in float16 autocast; use binary_cross_entropy_with_logits "
   "(it fuses the sigmoid), or run this op outside the region on float32 inputs"},
  // -- joining and indexing --
  {"cat",                                Promote, Promote, "joins tensors: one dtype for all"},
  {"stack",                              Promote, Promote, "joins tensors: one dtype for all"},
  {"scatter_add",                        Pass,    Promote, "cuda: one dtype for self and source"},
  {"index_add",                          Pass,    Pass,    "not listed"},
  {"gather",                             Pass,    Pass,    "indexing"},
  {"index_select",                       Pass,    Pass,    "indexing"},
  {"embedding",                          Pass,    Pass,    "indexing"},
  {"tril",                               Pass,    Pass,    "masking, exact in any dtype"},
  {"triu",                               Pass,    Pass,    "masking, exact in any dtype"},
  {"multinomial",                        Pass,    Pass,    "sampling: reads the weights in float64; integer output"},
  // -- pooling --
  {"max_pool2d",                         Pass,    Pass,    "exact in any dtype"},
  {"avg_pool2d",                         Pass,    Pass,    "not listed"},
  // -- padding: PyTorch's CPU autocast runs reflect and replicate pads in float32 --
  {"constant_pad",                       Pass,    Pass,    "not listed"},
  {"reflection_pad",                     F32,     Pass,    "cpu: PyTorch's fp32 list (reflection_pad1d/2d)"},
  {"replication_pad",                    F32,     Pass,    "cpu: PyTorch's fp32 list (replication_pad1d/2d/3d)"},
  {"circular_pad",                       Pass,    Pass,    "not listed"},
  {"pad_backward",                       Pass,    Pass,    "backward of reflect, replicate and circular pad"},
  {"adaptive_avg_pool2d",                Pass,    Pass,    "not listed"},
  {"adaptive_max_pool2d",                Pass,    Pass,    "exact in any dtype; not listed"},
  {"adaptive_avg_pool2d_backward",       Pass,    Pass,    "backward of adaptive_avg_pool2d"},
  {"adaptive_max_pool2d_backward",       Pass,    Pass,    "backward of adaptive_max_pool2d"},
  // -- upsampling --
  {"upsample_nearest2d",                 Pass,    Pass,    "not listed: copies values"},
  {"upsample_bilinear2d",                Pass,    Pass,    "not listed"},
  {"upsample_nearest2d_backward",        Pass,    Pass,    "backward of upsample_nearest2d"},
  {"upsample_bilinear2d_backward",       Pass,    Pass,    "backward of upsample_bilinear2d"},
  // -- gradient kernels recorded as ops: they run in the dtypes their forward saved --
  {"conv2d_backward",                    Pass,    Pass,    "backward of conv2d"},
  {"layer_norm_backward",                Pass,    Pass,    "backward of layer_norm"},
  {"batch_norm_backward",                Pass,    Pass,    "backward of batch_norm"},
  {"max_pool2d_backward",                Pass,    Pass,    "backward of max_pool2d"},
  {"avg_pool2d_backward",                Pass,    Pass,    "backward of avg_pool2d"},
  {"scaled_dot_product_attention_backward", Pass, Pass,  "backward of scaled_dot_product_attention"},
  {"relu_backward",                      Pass,    Pass,    "backward of relu"},
  {"gelu_backward",                      Pass,    Pass,    "backward of gelu"},
  {"softmax_backward",                   Pass,    Pass,    "backward of softmax"},
  {"log_softmax_backward",               Pass,    Pass,    "backward of log_softmax"},
  {"cross_entropy_backward",             Pass,    Pass,    "backward of cross_entropy"},
  {"avg_pool2d_input_grad",              Pass,    Pass,    "backward of avg_pool2d (create_graph)"},
  {"conv2d_input_grad",                  Pass,    Pass,    "backward of conv2d (create_graph)"},
  {"conv2d_weight_grad",                 Pass,    Pass,    "backward of conv2d (create_graph)"},
  {"nll_loss_backward",                  Pass,    Pass,    "backward of nll_loss"},
};
// clang-format on

const std::unordered_map<std::string_view, const PolicyRow*>& index() {
  static const auto map = [] {
    std::unordered_map<std::string_view, const PolicyRow*> m;
    for (const PolicyRow& row : kTable) {
      HG_CHECK(m.emplace(row.op, &row).second, "autocast", "the policy table has two rows for '{}'", row.op);
    }
    return m;
  }();
  return map;
}
}  // namespace

std::span<const PolicyRow> policy_table() { return kTable; }

const PolicyRow* find_policy_row(std::string_view op) {
  const auto& m = index();
  auto it = m.find(op);
  return it == m.end() ? nullptr : it->second;
}

const PolicyRow& policy_row(const OpDef& op) {
  if (const void* bound = op.autocast_row.load(std::memory_order_acquire)) return *static_cast<const PolicyRow*>(bound);
  const PolicyRow* row = find_policy_row(op.name);
  HG_CHECK(row != nullptr, op.name,
           "has no autocast policy row; add one to amp/policy_table.cpp (use Pass if the op should run in its "
           "inputs' dtypes)");
  op.autocast_row.store(row, std::memory_order_release);
  return *row;
}

std::vector<std::string> policy_table_problems() {
  std::vector<std::string> problems;
  std::set<std::string_view> ops;
  for (const OpDef* op : op_registry()) {
    ops.insert(op->name);
    if (!find_policy_row(op->name)) problems.push_back(fmt::format("op '{}' has no policy row", op->name));
  }
  for (const PolicyRow& row : kTable)
    if (!ops.count(row.op)) problems.push_back(fmt::format("policy row '{}' names no registered op", row.op));
  return problems;
}

CastPolicy policy_for(std::string_view op, DeviceType device) {
  const PolicyRow* row = find_policy_row(op);
  HG_CHECK(row != nullptr, op,
           "has no autocast policy row; add one to amp/policy_table.cpp (use Pass if the op should run in its "
           "inputs' dtypes)");
  return row->on(device);
}

std::string_view policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::LowerPrecision: return "lower precision";
    case CastPolicy::Fp32: return "fp32";
    case CastPolicy::Fp32OutputDtype: return "fp32 with output dtype";
    case CastPolicy::Promote: return "promote";
    case CastPolicy::Refused: return "refused";
    case CastPolicy::PassThrough: return "pass-through";
  }
  return "?";
}

}  // namespace hg::amp
