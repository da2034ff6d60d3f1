// Adam and AdamW with PyTorch's update rules (bias correction, optional AMSGrad). Adam adds
// weight decay to the gradient (L2); AdamW decays the weights directly (decoupled).
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
};

// A group of parameters with its own options (lr included), as a PyTorch param group.
struct AdamParamGroup {
  TensorList params;
  AdamOptions options;
};

class Adam : public Optimizer {
 public:
  Adam(TensorList params, AdamOptions options = {});
  explicit Adam(std::vector<AdamParamGroup> groups);
  void add_param_group(AdamParamGroup group);
  // A group's options, with its current learning rate.
  AdamOptions options(size_t group = 0) const;

  // Adds each parameter's own step count ("state.<i>.step", a 0-d int64 tensor).
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 protected:
  Adam(std::vector<AdamParamGroup> groups, const char* name, bool decoupled);
  void update(size_t i, const Tensor& param, const Tensor& grad) override;
  std::map<std::string, Hyperparameter> hyperparameters(size_t group) override;
  void check_hyperparameters(const std::map<std::string, double>& values) const override;
  static void check_adam(const char* name, double beta1, double beta2, double eps, double weight_decay, double amsgrad);
  bool skips_on_device() const override { return true; }
  bool unscales_in_update() const override { return true; }
  bool has_multi_update() const override { return true; }
  void update_multi(size_t group, const std::vector<size_t>& indices) override;
  std::vector<double> kernel_hyperparameters(size_t group) const override;

 private:
  void update_fused(size_t i, const Tensor& param, const Tensor& grad);
  // Makes parameter i's moments (or converts loaded ones to what the kernels read).
  void prepare_state(size_t i, const Tensor& param);
  // Parameter i's step count as the one-element int64 on its device that the kernels advance.
  Tensor step_tensor(size_t i, const Tensor& param);
  int64_t step_of(size_t i) const;

  std::vector<AdamOptions> options_;  // per group
  bool decoupled_;
  std::vector<int64_t> step_;  // per parameter: a parameter without a gradient does not advance
  // Parameters count their steps in a tensor on their device (int64 [1]; a skipped step does not
  // count; one tensor kept per parameter, so a step makes none), created from step_ on first
  // use; step_of() reads them back for state_dict.
  std::vector<Tensor> device_step_;
};

// AdamW: as Adam, but weight decay multiplies the parameter by (1 - lr * weight_decay). Its own
// aggregate (PyTorch's default weight_decay differs), so designated initialisers work as for Adam.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;

  AdamOptions adam() const { return {lr, beta1, beta2, eps, weight_decay, amsgrad}; }
};

struct AdamWParamGroup {
  TensorList params;
  AdamWOptions options;
};

class AdamW : public Adam {
 public:
  AdamW(TensorList params, AdamWOptions options = {});
  explicit AdamW(std::vector<AdamWParamGroup> groups);
  void add_param_group(AdamWParamGroup group) {
    Adam::add_param_group({std::move(group.params), group.options.adam()});
  }
};

}  // namespace hg::optim
