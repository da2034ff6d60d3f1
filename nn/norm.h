// LayerNorm, RMSNorm, GroupNorm, BatchNorm1d and BatchNorm2d (running statistics in buffers; batch
// statistics when training).
#pragma once

#include <optional>

#include "nn/module.h"

namespace hg::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
};

// Normalises over the trailing normalized_shape dims; weight = 1, bias = 0 at start.
// LayerNorm(64) normalises the last dim, LayerNorm({8, 64}) the last two.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  explicit LayerNorm(int64_t normalized_size, LayerNormOptions options = {})
      : LayerNorm(Shape{normalized_size}, options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override {
    return fmt::format("{}, eps={}, elementwise_affine={}", shape_, eps_, weight.defined());
  }
  Tensor weight, bias;

 private:
  Shape shape_;
  double eps_;
};

struct RMSNormOptions {
  std::optional<double> eps;  // unset: the compute dtype's machine epsilon, as PyTorch's eps=None
  bool elementwise_affine = true;
};

// hg::rms_norm over the trailing normalized_shape dims; weight = 1 at start (none without
// elementwise_affine).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, RMSNormOptions options = {});
  explicit RMSNorm(int64_t normalized_shape, RMSNormOptions options = {}) : RMSNorm(Shape{normalized_shape}, options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;

 private:
  Shape shape_;
  std::optional<double> eps_;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};

// x [N, C, ...]: hg::group_norm over num_groups groups of channels; weight = 1, bias = 0 ([C]).
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override {
    return fmt::format("{}, {}, eps={}, affine={}", groups_, channels_, eps_, weight.defined());
  }
  Tensor weight, bias;

 private:
  int64_t groups_, channels_;
  double eps_;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  bool affine = true;
  bool track_running_stats = true;
};

// x [N, C] or [N, C, L], as BatchNorm2d otherwise (the same batch_norm op and kernels, which take
// [N, C, ...]): running statistics, train/eval and state-dict keys as PyTorch's.
class BatchNorm1d : public Module {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override {
    return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", features_, eps_, momentum_,
                       weight.defined(), running_mean.defined());
  }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t features_;
  double eps_, momentum_;
};

// x [N, C, H, W]. Buffers running_mean (0), running_var (1) and num_batches_tracked (int64),
// as PyTorch's, so checkpoints carry the same keys.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual) as one op (batch_norm_add_relu: on CUDA the add and the ReLU run
  // in the normalising pass), a ResNet block's tail; residual may be undefined (BatchNorm +
  // ReLU). Like forward, it runs no hooks.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  std::string extra_repr() const override {
    return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", features_, eps_, momentum_,
                       weight.defined(), running_mean.defined());
  }
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  Tensor forward_add_relu_or_plain(const Tensor& x, const Tensor& residual, bool add_relu);
  int64_t features_;
  double eps_, momentum_;
};

}  // namespace hg::nn
