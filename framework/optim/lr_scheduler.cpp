#include "framework/optim/lr_scheduler.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "framework/ops/creation.h"
#include "framework/serialize/state_value.h"

namespace hg::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++last_epoch_;
  optimizer_.set_lr(lr_at(last_epoch_));
}

StateDict LRScheduler::state_dict() const {
  return {{"base_lr", scalar_tensor(base_lr_, kFloat64)},
          {"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kInt64)}};
}

void LRScheduler::load_state_dict(const StateDict& state) {
  for (const char* key : {"base_lr", "last_epoch"})
    HG_CHECK(state.count(key), "LRScheduler", "load_state_dict: missing key '{}'", key);
  for (const auto& [key, t] : state)
    HG_CHECK(key == "base_lr" || key == "last_epoch", "LRScheduler", "load_state_dict: unexpected key '{}'", key);
  const double base_lr =
      state_number(state.at("base_lr"), "LRScheduler", "base_lr", 0.0, std::numeric_limits<double>::max());
  const int64_t last_epoch = state_count(state.at("last_epoch"), "LRScheduler", "last_epoch", -1, int64_t{1} << 53);
  base_lr_ = base_lr;
  last_epoch_ = last_epoch;
  optimizer_.set_lr(lr_at(last_epoch_));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size > 0, "StepLR", "step_size must be positive, got {}", step_size);
  init();
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  HG_CHECK(t_max > 0, "CosineAnnealingLR", "t_max must be positive, got {}", t_max);
  init();
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double phase = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr() - eta_min_) * (1.0 + std::cos(phase)) / 2.0;
}

}  // namespace hg::optim
