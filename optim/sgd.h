// Stochastic gradient descent with momentum, dampening, Nesterov and weight decay (PyTorch's rule).
#pragma once

#include "optim/optimizer.h"

namespace hg::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// A group of parameters with its own options (lr included), as a PyTorch param group.
struct SGDParamGroup {
  TensorList params;
  SGDOptions options;
};

class SGD : public Optimizer {
 public:
  SGD(TensorList params, SGDOptions options = {});
  explicit SGD(std::vector<SGDParamGroup> groups);
  void add_param_group(SGDParamGroup group);
  // A group's options, with its current learning rate.
  SGDOptions options(size_t group = 0) const;
  void load_state_dict(const StateDict& state) override;

 protected:
  void update(size_t i, const Tensor& param, const Tensor& grad) override;
  std::map<std::string, Hyperparameter> hyperparameters(size_t group) override;
  void check_hyperparameters(const std::map<std::string, double>& values) const override;
  bool skips_on_device() const override { return true; }
  bool unscales_in_update() const override { return true; }
  bool has_multi_update() const override { return true; }
  void update_multi(size_t group, const std::vector<size_t>& indices) override;
  std::vector<double> kernel_hyperparameters(size_t group) const override;

 private:
  void update_fused(size_t i, const Tensor& param, const Tensor& grad);
  // Parameter i's momentum buffer (made or converted to what the kernels read) and, in `ready`,
  // its ready flag; undefined when the group has no momentum.
  Tensor momentum_buffer(size_t i, const Tensor& param, Tensor& ready);

  std::vector<SGDOptions> options_;  // per group
  // Fused path: per parameter, a one-element int32 on the parameter's device, set once the
  // momentum buffer has taken its first gradient (a step skipped on the device leaves it unset).
  std::vector<Tensor> buffer_ready_;
};

}  // namespace hg::optim
