// Built with oneDNN only (HG_HAVE_ONEDNN); see conv/onednn_plan.h.
#if HG_HAVE_ONEDNN

#include "kernels/cpu/conv/onednn_plan.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/conv/algorithm.h"
#include "kernels/cpu/onednn_common.h"
#include "kernels/cpu/thread_pool.h"

namespace hg::cpu::onednn_conv {

Problem problem_of(const Tensor& input, const Tensor& weight, int64_t oh, int64_t ow, bool bias,
                   const Conv2dParams& p) {
  Problem pr{};
  pr.dt = input.dtype() == kBFloat16 ? kBf16 : kF32;
  pr.n = input.size(0), pr.c = input.size(1), pr.h = input.size(2), pr.w = input.size(3);
  pr.o = weight.size(0), pr.kh = weight.size(2), pr.kw = weight.size(3), pr.oh = oh, pr.ow = ow;
  pr.groups = p.groups, pr.bias = bias;
  pr.nhwc = input.suggest_memory_format() == MemoryFormat::ChannelsLast;
  pr.ohwi = weight.suggest_memory_format() == MemoryFormat::ChannelsLast;
  for (int i = 0; i < 2; ++i) pr.stride[i] = p.stride[i], pr.padding[i] = p.padding[i], pr.dilation[i] = p.dilation[i];
  return pr;
}

ConvShape Problem::shape() const {
  ConvShape s;
  s.in_channels = c / groups, s.out_channels = o / groups, s.groups = groups;
  s.kh = kh, s.kw = kw, s.oh = oh, s.ow = ow;
  s.padding_h = padding[0], s.padding_w = padding[1];
  s.stride_h = stride[0], s.stride_w = stride[1];
  s.dilation_h = dilation[0], s.dilation_w = dilation[1];
  s.float32_primitives = dt == kF32;
  return s;
}

namespace {

// The pass's algorithm (conv/algorithm.h) where it is one of oneDNN's (Winograd on float32
// primitives; bfloat16's is conv/winograd_bf16.h, outside oneDNN), or direct when `direct_only`.
dnnl::algorithm conv_algo(const Problem& pr, ConvPass pass, bool direct_only) {
  return !direct_only && pr.dt == kF32 && conv_algorithm(pr.shape(), pass) == ConvAlgorithm::Winograd
             ? dnnl::algorithm::convolution_winograd
             : dnnl::algorithm::convolution_direct;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Problem& pr, const dnnl::primitive_attr& attr,
                                                     bool direct_only) {
  const memory::desc src(pr.src(), pr.dt, pr.activations_tag()), dst(pr.dst(), pr.dt, pr.activations_tag());
  const memory::desc weights(pr.weights(), pr.dt, Tag::any);
  const auto prop = dnnl::prop_kind::forward_training;
  const auto algo = conv_algo(pr, ConvPass::Forward, direct_only);
  if (pr.bias) {
    const memory::desc bias({pr.o}, pr.dt, Tag::a);
    return {{prop, algo, src, weights, bias, dst, pr.strides(), pr.dilates(), pr.pad_left(), pr.pad_right()},
            attr,
            cpu_engine()};
  }
  return {
      {prop, algo, src, weights, dst, pr.strides(), pr.dilates(), pr.pad_left(), pr.pad_right()}, attr, cpu_engine()};
}

dnnl::reorder make_reorder(const memory::desc& from, const memory::desc& to) {
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to));
}

// A plan on the chosen algorithm; `direct_only` when oneDNN declined Winograd for the problem.
std::shared_ptr<const Plan> make_plan(Pass pass, const Problem& pr, bool direct_only = false) {
  auto plan = std::make_shared<Plan>();
  plan->weights_ohwi = pr.ohwi;
  const dnnl::engine& engine = cpu_engine();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // scratch per thread, see run_chunk
  const memory::desc src_user(pr.src(), pr.dt, pr.user_tag()), dst_user(pr.dst(), pr.dt, pr.user_tag());
  const memory::desc src_prim(pr.src(), pr.dt, pr.activations_tag()), dst_prim(pr.dst(), pr.dt, pr.activations_tag());
  try {
    // The weight-gradient pass runs direct, and so does the forward it takes as its hint.
    const auto fwd = forward_pd(pr, attr, direct_only || filter_pass(pass));
    const char* impl = nullptr;
    if (pass == Pass::Forward) {
      plan->primitive = dnnl::convolution_forward(fwd);
      plan->scratch = fwd.scratchpad_desc();
      plan->in_user = src_user, plan->in_prim = src_prim, plan->out_user = dst_user, plan->out_prim = dst_prim;
      plan->weights_user = memory::desc(pr.weights(), pr.dt, pr.weights_tag());
      plan->weights_prim = fwd.weights_desc();
      if (pr.bias) plan->bias = fwd.bias_desc();
      impl = fwd.impl_info_str();
    } else if (pass == Pass::BackwardData) {
      const memory::desc weights(pr.weights(), pr.dt, Tag::any);
      const dnnl::convolution_backward_data::primitive_desc pd(
          {conv_algo(pr, ConvPass::InputGradient, direct_only), src_prim, weights, dst_prim, pr.strides(), pr.dilates(),
           pr.pad_left(), pr.pad_right()},
          attr, engine, fwd);
      plan->primitive = dnnl::convolution_backward_data(pd);
      plan->scratch = pd.scratchpad_desc();
      plan->in_user = dst_user, plan->in_prim = dst_prim, plan->out_user = src_user, plan->out_prim = src_prim;
      plan->weights_user = memory::desc(pr.weights(), pr.dt, pr.weights_tag());
      plan->weights_prim = pd.weights_desc();
      impl = pd.impl_info_str();
    } else {
      // Float32 weight (and bias) gradients: each chunk's partial sums are added in float32 and
      // rounded to bfloat16 once, as the float32 accumulation of the reference path does; or, for
      // the rounded pass, bfloat16 weight gradients rounded once by oneDNN (bias still float32).
      const auto weights_dt = pass == Pass::BackwardFilterRounded ? kBf16 : kF32;
      const memory::desc weights(pr.weights(), weights_dt, Tag::any);
      const auto algo = conv_algo(pr, ConvPass::WeightGradient, direct_only);
      using Desc = dnnl::convolution_backward_weights::desc;
      const Desc desc =
          pr.bias ? Desc(algo, src_prim, weights, memory::desc({pr.o}, kF32, Tag::a), dst_prim, pr.strides(),
                         pr.dilates(), pr.pad_left(), pr.pad_right())
                  : Desc(algo, src_prim, weights, dst_prim, pr.strides(), pr.dilates(), pr.pad_left(), pr.pad_right());
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, engine, fwd);
      plan->primitive = dnnl::convolution_backward_weights(pd);
      plan->scratch = pd.scratchpad_desc();
      plan->in_user = src_user, plan->in_prim = src_prim, plan->out_user = dst_user, plan->out_prim = dst_prim;
      plan->weights_prim = pd.diff_weights_desc();
      plan->weights_user = memory::desc(pr.weights(), weights_dt, pr.weights_tag());
      plan->rounded = pass == Pass::BackwardFilterRounded;
      if (pr.bias) plan->bias = pd.diff_bias_desc();
      plan->filter_blocks16 = pr.groups == 1 && pr.o % 16 == 0 && pr.c % 16 == 0 &&
                              plan->weights_prim == memory::desc(pr.weights(), weights_dt, Tag::ABcd16b16a);
      impl = pd.impl_info_str();
    }
    if (std::strstr(impl, "ref") != nullptr) return plan;  // a reference kernel: slower than halfgrad's own
    plan->in_reorder = make_reorder(plan->in_user, plan->in_prim);
    plan->out_reorder =
        filter_pass(pass) ? make_reorder(plan->out_user, plan->out_prim) : make_reorder(plan->out_prim, plan->out_user);
    plan->weights_reorder = filter_pass(pass) ? make_reorder(plan->weights_prim, plan->weights_user)
                                              : make_reorder(plan->weights_user, plan->weights_prim);
    plan->usable = true;
  } catch (const dnnl::error&) {
    // No oneDNN kernel for this problem on this algorithm: direct if it was Winograd, else
    // conv.cpp's own path runs it.
    if (!direct_only) return make_plan(pass, pr, true);
  }
  return plan;
}

}  // namespace

std::shared_ptr<const Plan> plan_for(Pass pass, const Problem& pr) {
  static PrimitiveCache<std::array<int64_t, 21>, Plan> plans;
  return plans.get(pr.key(pass), [&] { return make_plan(pass, pr); });
}

Chunks chunks_for(int64_t n, int64_t most) {
  const int64_t want = std::clamp<int64_t>(num_threads(), 1, std::max<int64_t>(n, 1));
  Chunks c;
  c.per = (n + want - 1) / want;
  if (most > 0) c.per = std::min(c.per, most);
  c.count = (n + c.per - 1) / c.per;
  return c;
}

ChunkPlans plans_for(Pass pass, Problem pr, const Chunks& c) {
  const int64_t n = pr.n;
  ChunkPlans plans;
  pr.n = c.per;
  plans.full = plan_for(pass, pr);
  pr.n = c.size(c.count - 1, n);
  plans.last = pr.n == c.per ? plans.full : plan_for(pass, pr);
  return plans;
}

}  // namespace hg::cpu::onednn_conv

#endif  // HG_HAVE_ONEDNN
