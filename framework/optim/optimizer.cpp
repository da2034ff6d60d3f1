#include "framework/optim/optimizer.h"

#include <limits>

#include "framework/grad_mode.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/serialize/state_value.h"

namespace hg::optim {

Optimizer::Optimizer(TensorList params, double lr, const char* name)
    : state_(params.size()), params_(std::move(params)), lr_(lr), name_(name) {
  HG_CHECK(lr >= 0, name_, "invalid learning rate {}", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    HG_CHECK(params_[i].defined() && params_[i].is_leaf() && params_[i].is_floating_point(), name_,
             "parameter {} must be a defined floating-point leaf tensor", i);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

void Optimizer::step(const Tensor& skip_if) {
  skip_flag_ = Tensor();
  if (skip_if.defined()) {
    HG_CHECK(skip_if.numel() == 1, name_, "skip_if must have one element, got shape {}", skip_if.shape());
    // On the CPU reading the flag is free. A device flag is left to kernels that read it where
    // it lives; only when some update cannot (a CPU parameter, an optimizer without a fused
    // kernel) is it read here, at the cost of one host synchronisation.
    bool read_on_host = skip_if.device().is_cpu() || !skips_on_device();
    for (const Tensor& p : params_) read_on_host = read_on_host || (p.grad().defined() && !p.device().is_cuda());
    if (read_on_host) {
      if (skip_if.item<double>() != 0) return;
    } else {
      NoGradGuard no_grad;
      skip_flag_ = contiguous(to(skip_if.detach().reshape({1}), skip_if.device(), kFloat32));
    }
  }
  struct ClearFlag {
    Tensor& flag;
    ~ClearFlag() { flag = Tensor(); }
  } clear{skip_flag_};
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].grad();
    if (!g.defined()) continue;
    HG_CHECK(g.shape() == params_[i].shape(), name_, "gradient of parameter {} has shape {}, parameter has {}", i,
             g.shape(), params_[i].shape());
    update(i, params_[i], g);
  }
  // Counts calls: a step skipped on the device by its kernels still counts here.
  ++steps_;
}

Tensor Optimizer::warm_cast_output(const Tensor& param) {
  const auto& meta = param.impl()->autograd;
  if (!meta || !meta->warm_cast || param.dtype() != kFloat32 || !param.is_contiguous()) return Tensor();
  return empty(param.shape(), TensorOptions(meta->warm_cast->dtype).device(param.device()));
}

void Optimizer::publish_warm_cast(const Tensor& param, const Tensor& value) {
  if (!value.defined()) return;
  WarmCast& warm = *param.impl()->autograd->warm_cast;
  warm.value = value;
  warm.version = param.version();
}

Tensor Optimizer::skip_flag(Device device) const {
  if (!skip_flag_.defined() || skip_flag_.device() == device) return skip_flag_;
  return to(skip_flag_, device, kFloat32);
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out["lr"] = scalar_tensor(lr_, kFloat64);
  for (const auto& [key, value] : const_cast<Optimizer*>(this)->hyperparameters())
    out["hp." + key] = scalar_tensor(value.get(), kFloat64);
  out["steps"] = scalar_tensor(static_cast<double>(steps_), kInt64);
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [key, t] : state_[i]) out[fmt::format("state.{}.{}", i, key)] = t.clone();
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  // Everything is read and checked first and committed last, so a bad checkpoint leaves the
  // optimizer as it was.
  auto get = [&](const std::string& key) -> const Tensor& {
    auto it = state.find(key);
    HG_CHECK(it != state.end(), name_, "load_state_dict: missing key '{}'", key);
    return it->second;
  };
  auto hps = hyperparameters();
  for (const auto& [key, t] : state) {
    if (key.starts_with("state.")) {
      state_index(std::string_view(key).substr(6), state_.size(), name_, key);
      continue;
    }
    HG_CHECK(key == "lr" || key == "steps" || (key.starts_with("hp.") && hps.count(key.substr(3))), name_,
             "load_state_dict: unexpected key '{}'", key);
  }
  const double lr = state_number(get("lr"), name_, "lr", 0.0, std::numeric_limits<double>::max());
  std::map<std::string, double> values;
  for (const auto& [key, value] : hps)
    values[key] = state_number(get("hp." + key), name_, "hp." + key, std::numeric_limits<double>::lowest(),
                               std::numeric_limits<double>::max());
  check_hyperparameters(values);
  const int64_t steps = state_count(get("steps"), name_, "steps", 0, int64_t{1} << 53);
  std::vector<StateDict> loaded(state_.size());
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string prefix = fmt::format("state.{}.", i);
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.starts_with(prefix); ++it) {
      const std::string key = it->first.substr(prefix.size());
      HG_CHECK(it->second.defined() && it->second.shape() == params_[i].shape(), name_,
               "load_state_dict: '{}' has shape {}, parameter {} has shape {}", it->first,
               it->second.defined() ? it->second.shape() : Shape{}, i, params_[i].shape());
      HG_CHECK(it->second.is_floating_point(), name_, "load_state_dict: '{}' has dtype {}, expected a floating type",
               it->first, it->second.dtype());
      loaded[i][key] = it->second.to(params_[i].device()).clone();
    }
  }
  lr_ = lr;
  for (auto& [key, value] : hps) value.set(values.at(key));
  steps_ = steps;
  state_ = std::move(loaded);
}

}  // namespace hg::optim
