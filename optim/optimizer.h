// The optimizer base: owns the parameters and their groups (each group its own learning rate and
// hyper-parameters, as PyTorch's param_groups), zero_grad, state_dict, and the skip flag that
// lets a GradScaler's found_inf tensor veto a step without a host round trip on the GPU.
#pragma once

#include <string>

#include "framework/tensor.h"
#include "serialize/state_dict.h"

namespace hg::optim {

class Optimizer {
 public:
  Optimizer(TensorList params, double lr, const char* name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Every parameter, group by group.
  const TensorList& params() const { return params_; }
  size_t num_param_groups() const { return group_lr_.size(); }
  // The parameters of one group, and the group parameter i belongs to.
  TensorList group_params(size_t group) const;
  // Indices are checked with hg::Error (never std::out_of_range from .at()).
  size_t group_of(size_t param_index) const {
    HG_CHECK(param_index < group_of_.size(), name_, "no parameter {} (there are {})", param_index, group_of_.size());
    return group_of_[param_index];
  }
  // A group's learning rate (group 0 by default); set_lr(lr) sets every group's.
  double lr(size_t group = 0) const {
    HG_CHECK(group < group_lr_.size(), name_, "no parameter group {} (there are {})", group, group_lr_.size());
    return group_lr_[group];
  }
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  const char* name() const { return name_; }
  int64_t steps() const { return steps_; }
  // Whether step() updates one parameter per kernel call (the path before multi-tensor updates)
  // rather than each (group, device, dtype) list in one call. Both give the same bits; the
  // per-parameter path stays for comparison. Defaults to the environment's HG_OPTIM_PER_PARAM=1.
  bool per_param() const { return per_param_; }
  void set_per_param(bool on) { per_param_ = on; }

  // Sets every parameter's gradient to undefined (set_to_none) or to zeros.
  void zero_grad(bool set_to_none = true);
  // One update of every parameter that has a gradient. `skip_if` is an optional one-element
  // tensor (the GradScaler's found_inf): when it is non-zero the whole step is skipped and no
  // parameter or state changes. Kernels read it where it lives, so a GPU step never syncs.
  void step(const Tensor& skip_if = Tensor());
  // GradScaler::step's fast path on the CPU. step_unscaling(inv_scale) is step() with every
  // gradient first multiplied by inv_scale (in float32) and that product written back into the
  // gradient, inside the update's own pass: bit for bit what GradScaler::unscale_ followed by
  // step() leave, with one read of each gradient fewer. It needs a fused update that can take
  // the multiply (SGD, Adam, AdamW) and every parameter with a gradient float32, contiguous and
  // on the CPU with a gradient of the same kind: can_step_unscaling() says whether that holds,
  // and step_unscaling throws when it does not.
  bool can_step_unscaling() const;
  void step_unscaling(float inv_scale);

  // Hyper-parameters (as 0-d float64 tensors), the step count and every state tensor.
  virtual StateDict state_dict() const;
  // Restores what state_dict() saved; throws naming the key on a missing or mismatched entry.
  virtual void load_state_dict(const StateDict& state);

 protected:
  // An optimizer whose groups the derived constructor adds (add_group).
  explicit Optimizer(const char* name) : name_(name) {}
  // Appends a group (checked as the constructor checks its parameters; a parameter already in a
  // group is an error); derived optimizers add their own per-group options and state after it.
  void add_group(TensorList params, double lr);
  // Applies the update to parameter i (grad defined); called under NoGradGuard.
  virtual void update(size_t i, const Tensor& param, const Tensor& grad) = 0;
  // Whether update() honours skip_flag() on CUDA parameters itself (a fused kernel reading the
  // flag on the device). When false, a CUDA skip_if is read on the host (one synchronisation).
  virtual bool skips_on_device() const { return false; }
  // Whether update() hands grad_unscale() to its fused kernel (see step_unscaling).
  virtual bool unscales_in_update() const { return false; }
  // Whether update_multi() is implemented; parameters it takes (contiguous ones) then go through it.
  virtual bool has_multi_update() const { return false; }
  // Updates the listed parameters (indices into params(); all of `group`, one device and dtype,
  // contiguous, each with a gradient of its shape) in one multi-tensor kernel call.
  virtual void update_multi(size_t /*group*/, const std::vector<size_t>& /*indices*/) {}
  // The values a group's multi-tensor kernel reads from its hyper tensor, in the kernel's slot
  // order (framework/ops/optim_update_kernels.h); lr first.
  virtual std::vector<double> kernel_hyperparameters(size_t group) const { return {lr(group)}; }
  // The group's hyper tensor on `device`: float64, made on first use, rewritten in place by
  // set_lr() and load_state_dict() (an asynchronous copy on a GPU), so a kernel queued or captured
  // earlier reads the values of the moment it runs.
  Tensor hyper_tensor(size_t group, Device device);
  // During step_unscaling(): the factor the fused kernel multiplies each gradient by, and writes
  // back; 0 otherwise.
  float grad_unscale() const { return grad_unscale_; }
  // During step(): the skip_if tensor as a one-element float32 tensor on `device` when it must be
  // read on the device; undefined when there is none (or it was already checked on the host).
  Tensor skip_flag(Device device) const;
  // For the fused kernels: an empty float16/bfloat16 tensor when `param` (float32, dense)
  // keeps a warm autocast cast (optim/warm_cast.h), which the kernel fills with the
  // new weights rounded to that dtype; undefined otherwise.
  static Tensor warm_cast_output(const Tensor& param);
  // The fused kernels update a dense parameter (internal::is_dense: contiguous, or channels-last as
  // PyTorch's model.to(memory_format=torch.channels_last) lays out 4-d weights) in place, reading
  // it, its gradient and its state as flat arrays laid out alike; other strided parameters (views
  // into larger tensors) go through a contiguous copy.
  // t (a gradient or a state tensor) on param's device, in its dtype and memory layout.
  static Tensor like_param(const Tensor& t, const Tensor& param);
  // A zero state tensor laid out as param.
  static Tensor zeros_like_param(const Tensor& param);
  // After the update and its version bump: `value` (from warm_cast_output) becomes param's warm cast.
  static void publish_warm_cast(const Tensor& param, const Tensor& value);
  // A scalar hyper-parameter option (a number or a flag), saved in state_dict as a float64.
  class Hyperparameter {
   public:
    Hyperparameter(double* value) : number_(value) {}
    Hyperparameter(bool* flag) : flag_(flag) {}
    double get() const { return number_ ? *number_ : (*flag_ ? 1.0 : 0.0); }
    void set(double v) const { number_ ? void(*number_ = v) : void(*flag_ = v != 0); }

   private:
    double* number_ = nullptr;
    bool* flag_ = nullptr;
  };
  // A group's scalar hyper-parameters besides lr (momentum, betas, nesterov, ...), pointing into
  // that group's options; saved in state_dict.
  virtual std::map<std::string, Hyperparameter> hyperparameters(size_t /*group*/) { return {}; }
  // Checks hyper-parameter values read from a checkpoint (already finite) against the same rules
  // as the constructor; throws hg::Error naming the optimizer.
  virtual void check_hyperparameters(const std::map<std::string, double>& /*values*/) const {}
  // State tensors per parameter, by name ("momentum_buffer", "exp_avg", ...).
  std::vector<StateDict> state_;

 private:
  // state_dict keys of a group's entries: "lr" and "hp.<name>" for group 0 (the keys of an
  // optimizer without groups), "group.<g>.lr" and "group.<g>.hp.<name>" for the others.
  static std::string group_key(size_t group, const std::string& key);
  void update_each();
  // Writes a group's kernel_hyperparameters() into its hyper tensors (no host synchronisation).
  void write_hyper(size_t group);

  TensorList params_;
  std::vector<size_t> group_of_;  // per parameter
  std::vector<double> group_lr_;  // per group
  const char* name_;
  int64_t steps_ = 0;
  Tensor skip_flag_;                // set for the duration of step()
  std::vector<TensorList> hyper_;   // per group: its hyper tensor on each device it has been used on
  static bool per_param_default();  // HG_OPTIM_PER_PARAM=1
  bool per_param_ = per_param_default();
  float grad_unscale_ = 0.0f;  // set for the duration of step_unscaling()
};

}  // namespace hg::optim
