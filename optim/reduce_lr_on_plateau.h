// ReduceLROnPlateau: lowers every group's lr by `factor` once a metric has stopped improving for
// `patience` steps, as torch.optim.lr_scheduler.ReduceLROnPlateau. Not a closed form of the epoch
// (it follows the metric), so it is not an LRScheduler: step(metric) drives it.
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

struct ReduceLROnPlateauOptions {
  enum class Mode { Min, Max } mode = Mode::Min;  // whether lower or higher metrics are better
  double factor = 0.1;                            // new lr = lr * factor, in [0, 1)
  int64_t patience = 10;                          // bad steps tolerated before a reduction
  double threshold = 1e-4;                        // how much better counts as better
  enum class Threshold { Rel, Abs } threshold_mode = Threshold::Rel;
  int64_t cooldown = 0;  // steps after a reduction during which bad steps are not counted
  double min_lr = 0;     // no group's lr goes below it
  double eps = 1e-8;     // a reduction smaller than this is skipped
};

class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  // One epoch's metric (a NaN is never an improvement, as in PyTorch).
  void step(double metric);
  double get_last_lr(size_t group = 0) const { return optimizer_.lr(group); }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }

  StateDict state_dict() const;  // best, num_bad_epochs, cooldown_counter, last_epoch
  void load_state_dict(const StateDict& state);

 private:
  bool is_better(double a) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace hg::optim
