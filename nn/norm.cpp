#include "nn/norm.h"

#include "framework/grad_mode.h"
#include "framework/ops/creation.h"
#include "framework/ops/norm.h"
#include "framework/ops/rms_norm.h"

namespace hg::nn {

LayerNorm::LayerNorm(Shape normalized_shape, LayerNormOptions options)
    : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(options.eps) {
  HG_CHECK(!shape_.empty(), "LayerNorm", "normalized_shape must not be empty");
  for (int64_t n : shape_) HG_CHECK(n > 0, "LayerNorm", "normalized_shape must be positive, got {}", shape_);
  HG_CHECK(options.eps > 0, "LayerNorm", "eps must be positive, got {}", options.eps);
  if (options.elementwise_affine) {
    register_parameter("weight", weight, ones(shape_));
    register_parameter("bias", bias, zeros(shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, shape_, weight, bias, eps_); }

RMSNorm::RMSNorm(Shape normalized_shape, RMSNormOptions options)
    : Module("RMSNorm"), shape_(std::move(normalized_shape)), eps_(options.eps) {
  HG_CHECK(!shape_.empty(), "RMSNorm", "normalized_shape must not be empty");
  if (options.elementwise_affine) register_parameter("weight", weight, ones(shape_));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, shape_, weight, eps_); }

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", shape_, eps_ ? fmt::format("{}", *eps_) : "None",
                     weight.defined());
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
    : Module("GroupNorm"), groups_(num_groups), channels_(num_channels), eps_(options.eps) {
  HG_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, "GroupNorm",
           "num_channels {} must be a positive multiple of num_groups {}", num_channels, num_groups);
  if (options.affine) {
    register_parameter("weight", weight, ones({num_channels}));
    register_parameter("bias", bias, zeros({num_channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, groups_, weight, bias, eps_); }

namespace {

// BatchNorm1d and BatchNorm2d differ only in the input shapes they take: the options' checks,
// the parameters and the running statistics are set up here for both.
template <class BatchNorm>
void init_batch_norm(BatchNorm& m, const char* name, int64_t num_features, const BatchNormOptions& options) {
  HG_CHECK(num_features > 0, name, "num_features must be positive, got {}", num_features);
  HG_CHECK(options.eps > 0, name, "eps must be positive, got {}", options.eps);
  HG_CHECK(options.momentum >= 0 && options.momentum <= 1, name, "momentum must be in [0, 1], got {}",
           options.momentum);
  if (options.affine) {
    m.register_parameter("weight", m.weight, ones({num_features}));
    m.register_parameter("bias", m.bias, zeros({num_features}));
  }
  if (options.track_running_stats) {
    m.register_buffer("running_mean", m.running_mean, zeros({num_features}));
    m.register_buffer("running_var", m.running_var, ones({num_features}));
    m.register_buffer("num_batches_tracked", m.num_batches_tracked, zeros({}, kInt64));
  }
}

}  // namespace

BatchNorm1d::BatchNorm1d(int64_t num_features, BatchNormOptions options)
    : Module("BatchNorm1d"), features_(num_features), eps_(options.eps), momentum_(options.momentum) {
  init_batch_norm(*this, "BatchNorm1d", num_features, options);
}

Tensor BatchNorm1d::forward(const Tensor& x) {
  HG_CHECK((x.dim() == 2 || x.dim() == 3) && x.size(1) == features_, "BatchNorm1d",
           "expected input [N, {0}] or [N, {0}, L], got shape {1}", features_, x.shape());
  const bool use_batch_stats = is_training() || !running_mean.defined();
  // A batch variance needs two values per channel (PyTorch refuses the same).
  HG_CHECK(!use_batch_stats || x.numel() / features_ > 1, "BatchNorm1d",
           "expected more than 1 value per channel when training, got input shape {}", x.shape());
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  // batch_norm takes [N, C, ...]: [N, C] is [N, C] with no trailing dims, no reshape needed.
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, momentum_, eps_);
}

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNormOptions options)
    : Module("BatchNorm2d"), features_(num_features), eps_(options.eps), momentum_(options.momentum) {
  init_batch_norm(*this, "BatchNorm2d", num_features, options);
}

Tensor BatchNorm2d::forward(const Tensor& x) { return forward_add_relu_or_plain(x, Tensor(), false); }

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  return forward_add_relu_or_plain(x, residual, true);
}

Tensor BatchNorm2d::forward_add_relu_or_plain(const Tensor& x, const Tensor& residual, bool add_relu) {
  HG_CHECK(x.dim() == 4 && x.size(1) == features_, "BatchNorm2d", "expected input [N, {}, H, W], got shape {}",
           features_, x.shape());
  // Without running statistics, eval mode normalises with the batch statistics too (as PyTorch).
  const bool use_batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  if (add_relu)
    return batch_norm_add_relu(x, running_mean, running_var, weight, bias, residual, use_batch_stats, momentum_, eps_);
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, momentum_, eps_);
}

}  // namespace hg::nn
