#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>

#include "framework/ops/creation.h"
#include "serialize/state_value.h"

namespace hg::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
}

void LRScheduler::apply() {
  // A group added to the optimizer after the scheduler was made starts from its lr then.
  for (size_t g = base_lrs_.size(); g < optimizer_.num_param_groups(); ++g) base_lrs_.push_back(optimizer_.lr(g));
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = group_lr_at(last_epoch_, base_lrs_[g], g);
    HG_CHECK(std::isfinite(lr) && lr >= 0, name_, "epoch {} gives group {} the learning rate {}", last_epoch_, g, lr);
    optimizer_.set_lr(g, lr);
  }
}

void LRScheduler::step() {
  // As PyTorch: a schedule stepped before its optimizer ever stepped skips the schedule's first
  // value, which is almost always a loop written in the wrong order. Said once per process.
  if (last_epoch_ == 0 && optimizer_.steps() == 0) {
    static std::once_flag warned;
    std::call_once(warned, [this] {
      fmt::print(stderr,
                 "halfgrad warning: {}.step() was called before the optimizer's step(): the schedule's first learning "
                 "rate is skipped. Call optimizer.step() first, then scheduler.step() (this warning is shown once)\n",
                 name_);
    });
  }
  ++last_epoch_;
  apply();
}

StateDict LRScheduler::state_dict() const {
  StateDict out{{"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kInt64)}};
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out[g == 0 ? "base_lr" : fmt::format("base_lr.{}", g)] = scalar_tensor(base_lrs_[g], kFloat64);
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const size_t groups = std::max(base_lrs_.size(), optimizer_.num_param_groups());
  std::vector<double> base(groups);
  for (size_t g = 0; g < groups; ++g) {
    const std::string key = g == 0 ? "base_lr" : fmt::format("base_lr.{}", g);
    HG_CHECK(state.count(key), name_, "load_state_dict: missing key '{}'", key);
    base[g] = state_number(state.at(key), name_, key, 0.0, std::numeric_limits<double>::max());
  }
  HG_CHECK(state.count("last_epoch"), name_, "load_state_dict: missing key 'last_epoch'");
  HG_CHECK(state.size() == groups + 1, name_, "load_state_dict: {} entries for {} parameter groups (expected {})",
           state.size(), groups, groups + 1);
  const int64_t last_epoch = state_count(state.at("last_epoch"), name_, "last_epoch", -1, int64_t{1} << 53);
  base_lrs_ = base;
  last_epoch_ = last_epoch;
  apply();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  name_ = "StepLR";
  HG_CHECK(step_size > 0, name_, "step_size must be positive, got {}", step_size);
  apply();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  name_ = "MultiStepLR";
  for (int64_t m : milestones_) HG_CHECK(m >= 0, name_, "milestones must be non-negative, got {}", m);
  std::sort(milestones_.begin(), milestones_.end());
  apply();
}

double MultiStepLR::lr_at(int64_t epoch, double base_lr) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  name_ = "ExponentialLR";
  HG_CHECK(std::isfinite(gamma) && gamma >= 0, name_, "gamma must be finite and non-negative, got {}", gamma);
  apply();
}

double ExponentialLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch));
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LambdaLR(optimizer, std::vector<std::function<double(int64_t)>>{std::move(lr_lambda)}) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<std::function<double(int64_t)>> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  name_ = "LambdaLR";
  HG_CHECK(lambdas_.size() == 1 || lambdas_.size() == optimizer.num_param_groups(), name_,
           "got {} lr_lambdas for {} parameter groups (expected 1 or one per group)", lambdas_.size(),
           optimizer.num_param_groups());
  for (size_t i = 0; i < lambdas_.size(); ++i)
    HG_CHECK(static_cast<bool>(lambdas_[i]), name_, "lr_lambda {} is empty", i);
  apply();
}

double LambdaLR::lr_at(int64_t epoch, double base_lr) const { return base_lr * lambdas_[0](epoch); }

double LambdaLR::group_lr_at(int64_t epoch, double base_lr, size_t group) const {
  // A group added after construction (PyTorch would fail) takes the first function.
  return base_lr * lambdas_[lambdas_.size() == 1 || group >= lambdas_.size() ? 0 : group](epoch);
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  name_ = "CosineAnnealingLR";
  HG_CHECK(t_max > 0, name_, "t_max must be positive, got {}", t_max);
  apply();
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  const double phase = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(phase)) / 2.0;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_(total_iters) {
  name_ = "LinearLR";
  HG_CHECK(start_factor > 0 && start_factor <= 1, name_, "start_factor must be in (0, 1], got {}", start_factor);
  HG_CHECK(end_factor >= 0 && end_factor <= 1, name_, "end_factor must be in [0, 1], got {}", end_factor);
  HG_CHECK(total_iters > 0, name_, "total_iters must be positive, got {}", total_iters);
  apply();
}

double LinearLR::lr_at(int64_t epoch, double base_lr) const {
  const double t = static_cast<double>(std::min(epoch, total_)) / static_cast<double>(total_);
  return base_lr * (start_ + (end_ - start_) * t);
}

namespace {
std::vector<double> same_for_every_group(const Optimizer& opt, double value) {
  return std::vector<double>(opt.num_param_groups(), value);
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleOptions options)
    : OneCycleLR(optimizer, same_for_every_group(optimizer, max_lr), options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, OneCycleOptions options)
    : LRScheduler(optimizer), options_(options) {
  name_ = "OneCycleLR";
  HG_CHECK(options.total_steps > 0, name_, "total_steps must be positive, got {}", options.total_steps);
  HG_CHECK(options.pct_start >= 0 && options.pct_start <= 1, name_, "pct_start must be in [0, 1], got {}",
           options.pct_start);
  HG_CHECK(options.div_factor > 0 && options.final_div_factor > 0, name_,
           "div_factor and final_div_factor must be positive, got {} and {}", options.div_factor,
           options.final_div_factor);
  HG_CHECK(max_lrs.size() == optimizer.num_param_groups(), name_, "got {} max_lrs for {} parameter groups",
           max_lrs.size(), optimizer.num_param_groups());
  for (double m : max_lrs) HG_CHECK(std::isfinite(m) && m > 0, name_, "max_lr must be positive, got {}", m);
  set_base_lrs(std::move(max_lrs));
  apply();
}

double OneCycleLR::lr_at(int64_t step, double max_lr) const {
  // As PyTorch, total_steps calls of step() are allowed and one more throws. The lr after the
  // last call (only seen by a loop that steps the scheduler after its final batch) stays the
  // final one, where PyTorch extrapolates the last leg (to a negative lr for a linear one).
  HG_CHECK(step <= options_.total_steps, name_, "stepped {} times, but total_steps is {}", step, options_.total_steps);
  const double initial = max_lr / options_.div_factor, minimum = initial / options_.final_div_factor;
  const double total = static_cast<double>(options_.total_steps);
  // The legs: (last step of the leg, lr at its start, lr at its end), as PyTorch lays them out.
  struct Leg {
    double end_step, start_lr, end_lr;
  };
  std::vector<Leg> legs;
  if (options_.three_phase) {
    legs = {{options_.pct_start * total - 1, initial, max_lr},
            {2 * options_.pct_start * total - 2, max_lr, initial},
            {total - 1, initial, minimum}};
  } else {
    legs = {{options_.pct_start * total - 1, initial, max_lr}, {total - 1, max_lr, minimum}};
  }
  double start_step = 0;
  const auto s = static_cast<double>(std::min(step, options_.total_steps - 1));
  for (size_t i = 0; i < legs.size(); ++i) {
    if (s <= legs[i].end_step || i == legs.size() - 1) {
      const double pct = (s - start_step) / (legs[i].end_step - start_step);
      if (options_.anneal_strategy == Anneal::Linear)
        return (legs[i].end_lr - legs[i].start_lr) * pct + legs[i].start_lr;
      return legs[i].end_lr + (legs[i].start_lr - legs[i].end_lr) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
    }
    start_step = legs[i].end_step;
  }
  return minimum;  // not reached
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<LRScheduler*> schedulers, std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  name_ = "SequentialLR";
  HG_CHECK(!schedulers_.empty(), name_, "needs at least one scheduler");
  HG_CHECK(milestones_.size() + 1 == schedulers_.size(), name_, "got {} milestones for {} schedulers (expected {})",
           milestones_.size(), schedulers_.size(), schedulers_.size() - 1);
  for (size_t i = 0; i < schedulers_.size(); ++i) HG_CHECK(schedulers_[i] != nullptr, name_, "scheduler {} is null", i);
  for (size_t i = 0; i < milestones_.size(); ++i) {
    HG_CHECK(milestones_[i] > 0 && (i == 0 || milestones_[i] > milestones_[i - 1]), name_,
             "milestones must be positive and increasing, got {} at position {}", milestones_[i], i);
  }
  set_base_lrs(schedulers_[0]->base_lrs());  // the lrs the optimizer had before any scheduler changed them
  apply();
}

double SequentialLR::lr_at(int64_t epoch, double base_lr) const {
  const auto k =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  const int64_t start = k == 0 ? 0 : milestones_[k - 1];
  return schedulers_[k]->lr_for(epoch - start, base_lr);
}

}  // namespace hg::optim
