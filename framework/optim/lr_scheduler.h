// Learning-rate schedules that set an optimizer's lr once per step() (usually once per epoch),
// from closed forms of PyTorch's StepLR and CosineAnnealingLR.
#pragma once

#include "framework/optim/optimizer.h"

namespace hg::optim {

class LRScheduler {
 public:
  // Remembers the optimizer's current lr as the base lr and sets the lr of epoch 0.
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  // Moves to the next epoch and sets its lr.
  void step();
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }
  double get_last_lr() const { return optimizer_.lr(); }

  StateDict state_dict() const;  // base_lr and last_epoch
  void load_state_dict(const StateDict& state);

 protected:
  virtual double lr_at(int64_t epoch) const = 0;
  void init() { optimizer_.set_lr(lr_at(last_epoch_)); }

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma^(epoch / step_size) (integer division).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / t_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

}  // namespace hg::optim
