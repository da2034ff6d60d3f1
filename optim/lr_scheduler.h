// Learning-rate schedules: each step() sets every parameter group's lr from a closed form of
// the epoch (or step) count and that group's base lr, as PyTorch's schedulers do when given an
// epoch. StepLR, MultiStepLR, ExponentialLR, LambdaLR, CosineAnnealingLR, LinearLR (warm-up),
// OneCycleLR, and SequentialLR to chain them. ReduceLROnPlateau follows a metric instead
// (optim/reduce_lr_on_plateau.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

class LRScheduler {
 public:
  // Remembers each group's current lr as its base lr (the derived constructor then sets the lrs
  // of epoch 0).
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Moves to the next epoch and sets its lrs.
  void step();
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr(size_t group = 0) const {
    HG_CHECK(group < base_lrs_.size(), name_, "no parameter group {} (there are {})", group, base_lrs_.size());
    return base_lrs_[group];
  }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  double get_last_lr(size_t group = 0) const { return optimizer_.lr(group); }
  // The lr this schedule gives a group with this base lr at this epoch.
  double lr_for(int64_t epoch, double base_lr) const { return lr_at(epoch, base_lr); }

  StateDict state_dict() const;  // base lrs and last_epoch
  void load_state_dict(const StateDict& state);

 protected:
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;
  // The lr of one group; schedules that differ per group (LambdaLR with one function per group)
  // override it, the others are lr_at for every group.
  virtual double group_lr_at(int64_t epoch, double base_lr, size_t /*group*/) const { return lr_at(epoch, base_lr); }
  // Sets every group's lr for last_epoch(); derived constructors call it once they are set up.
  void apply();
  Optimizer& optimizer() const { return optimizer_; }
  void set_base_lrs(std::vector<double> lrs) { base_lrs_ = std::move(lrs); }
  const char* name_ = "LRScheduler";

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma^(epoch / step_size) (integer division).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(how many milestones are <= epoch); a milestone listed twice counts twice,
// as PyTorch's (a Counter).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  double gamma_;
};

// lr = base_lr * lr_lambda(epoch), with one function for every group or one per group, as
// PyTorch's. The functions must be pure functions of the epoch: the state dict keeps only the epoch.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<std::function<double(int64_t)>> lr_lambdas);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;
  double group_lr_at(int64_t epoch, double base_lr, size_t group) const override;

 private:
  std::vector<std::function<double(int64_t)>> lambdas_;  // one, or one per group
};

// lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / t_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up (or decay): lr = base_lr * (start + (end - start) min(epoch, total_iters) / total_iters).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// The one-cycle policy (Smith and Topin), stepped once per batch: from max_lr / div_factor up to
// max_lr over the first pct_start of total_steps, then down to initial / final_div_factor, each
// leg annealed by a cosine (or linearly). Every group cycles to the same max_lr, or each to its
// own (max_lrs, one per group). Momentum is not cycled. Stepping past total_steps throws.
enum class Anneal { Cos, Linear };
struct OneCycleOptions {
  int64_t total_steps = 0;
  double pct_start = 0.3;
  Anneal anneal_strategy = Anneal::Cos;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;  // a third leg: back down to initial, then to the minimum
};
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleOptions options);
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, OneCycleOptions options);

 protected:
  // base_lr is the group's max_lr here.
  double lr_at(int64_t step, double max_lr) const override;

 private:
  OneCycleOptions options_;
};

// Runs schedulers one after another: schedulers[k] from milestones[k-1] on, counting its epochs
// from its milestone; every one uses the base lrs the first one took from the optimizer. The
// schedulers must be made (in order) on this optimizer right before this one, and are then driven
// only through it; they must outlive it.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<LRScheduler*> schedulers, std::vector<int64_t> milestones);

 protected:
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<LRScheduler*> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace hg::optim
