#include "optim/reduce_lr_on_plateau.h"

#include <cmath>
#include <limits>

#include "framework/ops/creation.h"
#include "serialize/state_value.h"

namespace hg::optim {

namespace {
constexpr const char* kName = "ReduceLROnPlateau";
using Options = ReduceLROnPlateauOptions;
}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(options) {
  HG_CHECK(options.factor >= 0 && options.factor < 1, kName, "factor must be in [0, 1), got {}", options.factor);
  HG_CHECK(options.patience >= 0 && options.cooldown >= 0, kName,
           "patience and cooldown must be non-negative, got {} and {}", options.patience, options.cooldown);
  HG_CHECK(options.threshold >= 0 && std::isfinite(options.threshold), kName,
           "threshold must be finite and non-negative, got {}", options.threshold);
  HG_CHECK(options.min_lr >= 0 && options.eps >= 0, kName, "min_lr and eps must be non-negative, got {} and {}",
           options.min_lr, options.eps);
  // The worst value for the mode, so the first metric is always an improvement.
  best_ = options.mode == Options::Mode::Min ? std::numeric_limits<double>::infinity()
                                             : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double a) const {
  const bool rel = options_.threshold_mode == Options::Threshold::Rel;
  if (options_.mode == Options::Mode::Min)
    return rel ? a < best_ * (1 - options_.threshold) : a < best_ - options_.threshold;
  return rel ? a > best_ * (1 + options_.threshold) : a > best_ + options_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // bad epochs in cooldown are ignored
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
      const double old_lr = optimizer_.lr(g), new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

StateDict ReduceLROnPlateau::state_dict() const {
  return {{"best", scalar_tensor(best_, kFloat64)},
          {"num_bad_epochs", scalar_tensor(static_cast<double>(num_bad_epochs_), kInt64)},
          {"cooldown_counter", scalar_tensor(static_cast<double>(cooldown_counter_), kInt64)},
          {"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kInt64)}};
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  for (const char* key : {"best", "num_bad_epochs", "cooldown_counter", "last_epoch"})
    HG_CHECK(state.count(key), kName, "load_state_dict: missing key '{}'", key);
  HG_CHECK(state.size() == 4, kName, "load_state_dict: {} entries, expected 4", state.size());
  // best is +-inf until a first metric arrives, so it is read without state_number's finite check.
  const Tensor& b = state.at("best");
  HG_CHECK(b.defined() && b.numel() == 1, kName, "load_state_dict: 'best' must hold one number");
  const double best = b.item<double>();
  HG_CHECK(!std::isnan(best), kName, "load_state_dict: 'best' is NaN");
  constexpr int64_t kMax = int64_t{1} << 53;
  const int64_t bad = state_count(state.at("num_bad_epochs"), kName, "num_bad_epochs", 0, kMax);
  const int64_t cooldown = state_count(state.at("cooldown_counter"), kName, "cooldown_counter", 0, kMax);
  const int64_t epoch = state_count(state.at("last_epoch"), kName, "last_epoch", 0, kMax);
  best_ = best, num_bad_epochs_ = bad, cooldown_counter_ = cooldown, last_epoch_ = epoch;
}

}  // namespace hg::optim
