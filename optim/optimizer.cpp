#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string_view>

#include "framework/capture_state.h"
#include "framework/grad_mode.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "optim/warm_cast.h"
#include "serialize/state_value.h"

namespace hg::optim {

bool Optimizer::per_param_default() {
  const char* v = std::getenv("HG_OPTIM_PER_PARAM");
  return v != nullptr && std::string_view(v) == "1";
}

Optimizer::Optimizer(TensorList params, double lr, const char* name) : name_(name) { add_group(std::move(params), lr); }

void Optimizer::add_group(TensorList params, double lr) {
  HG_CHECK(lr >= 0, name_, "invalid learning rate {}", lr);
  for (size_t i = 0; i < params.size(); ++i) {
    HG_CHECK(params[i].defined() && params[i].is_leaf() && params[i].is_floating_point(), name_,
             "parameter {} of group {} must be a defined floating-point leaf tensor", i, group_lr_.size());
    for (size_t j = 0; j < params_.size(); ++j) {
      HG_CHECK(params_[j].impl() != params[i].impl(), name_,
               "parameter {} of group {} is already in group {} (a parameter may be in one group only)", i,
               group_lr_.size(), group_of_[j]);
    }
    for (size_t j = 0; j < i; ++j) {
      HG_CHECK(params[j].impl() != params[i].impl(), name_, "parameter {} of group {} is listed twice", i,
               group_lr_.size());
    }
  }
  for (Tensor& p : params) {
    params_.push_back(std::move(p));
    group_of_.push_back(group_lr_.size());
    state_.emplace_back();
  }
  group_lr_.push_back(lr);
  hyper_.emplace_back();
}

TensorList Optimizer::group_params(size_t group) const {
  HG_CHECK(group < group_lr_.size(), name_, "no parameter group {} (there are {})", group, group_lr_.size());
  TensorList out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (group_of_[i] == group) out.push_back(params_[i]);
  return out;
}

void Optimizer::set_lr(double lr) {
  HG_CHECK(lr >= 0, name_, "invalid learning rate {}", lr);
  for (double& g : group_lr_) g = lr;
  for (size_t g = 0; g < group_lr_.size(); ++g) write_hyper(g);
}

void Optimizer::set_lr(size_t group, double lr) {
  HG_CHECK(group < group_lr_.size(), name_, "no parameter group {} (there are {})", group, group_lr_.size());
  HG_CHECK(lr >= 0, name_, "invalid learning rate {}", lr);
  group_lr_[group] = lr;
  write_hyper(group);
}

Tensor Optimizer::hyper_tensor(size_t group, Device device) {
  for (const Tensor& t : hyper_[group])
    if (t.device() == device) return t;
  NoGradGuard no_grad;
  Tensor t = contiguous(to(tensor(kernel_hyperparameters(group)), device, kFloat64));
  hyper_[group].push_back(t);
  return t;
}

void Optimizer::write_hyper(size_t group) {
  if (hyper_[group].empty()) return;
  NoGradGuard no_grad;
  const Tensor host = tensor(kernel_hyperparameters(group));
  // A host-to-device copy is queued on the device's stream: kernels queued before it read the
  // old values, those after it the new ones, and the host does not wait.
  for (Tensor& t : hyper_[group]) t.copy_(host);
}

std::string Optimizer::group_key(size_t group, const std::string& key) {
  return group == 0 ? key : fmt::format("group.{}.{}", group, key);
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
      capture::refuse_host_sync(name_, skip_if.device(),
                                "read the skip flag (GradScaler's found-inf) on the host, as this optimizer has no "
                                "device-side skip for all its parameters");
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
  update_each();
}

// step()'s and step_unscaling()'s update of every parameter with a gradient. Counts calls: a
// step skipped on the device by its kernels still counts here.
void Optimizer::update_each() {
  NoGradGuard no_grad;
  // The parameters the multi-tensor update takes, one list per (group, device, dtype), in the
  // order first met; the others (strided ones, or all on the per-parameter path) one at a time.
  struct List {
    size_t group;
    Device device;
    Dtype dtype;
    std::vector<size_t> indices;
  };
  std::vector<List> lists;
  const bool multi = has_multi_update() && !per_param_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    HG_CHECK(g.shape() == p.shape(), name_, "gradient of parameter {} has shape {}, parameter has {}", i, g.shape(),
             p.shape());
    if (!(multi && p.is_contiguous()) && capture::active_on(p.device())) {
      fail(name_,
           "cannot update parameter {} on its own during a CUDA graph capture: that path passes the learning rate "
           "by value, so every replay would keep the captured one (use contiguous parameters, and unset "
           "HG_OPTIM_PER_PARAM)",
           i);
    }
    if (multi && p.is_contiguous()) {
      auto it = std::find_if(lists.begin(), lists.end(), [&](const List& l) {
        return l.group == group_of_[i] && l.device == p.device() && l.dtype == p.dtype();
      });
      if (it == lists.end()) it = lists.insert(lists.end(), List{group_of_[i], p.device(), p.dtype(), {}});
      it->indices.push_back(i);
      continue;
    }
    update(i, p, g);
    if (grad_unscale_ != 0.0f) g.bump_version();  // the kernel wrote the unscaled values into it
  }
  for (const List& l : lists) {
    update_multi(l.group, l.indices);
    if (grad_unscale_ != 0.0f)
      for (size_t i : l.indices) params_[i].grad().bump_version();
  }
  ++steps_;
}

bool Optimizer::can_step_unscaling() const {
  if (!unscales_in_update()) return false;
  for (const Tensor& p : params_) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    const bool fits = p.device().is_cpu() && p.dtype() == kFloat32 && p.is_contiguous() && g.device() == p.device() &&
                      g.dtype() == kFloat32 && g.is_contiguous() && g.shape() == p.shape();
    if (!fits) return false;
  }
  return true;
}

void Optimizer::step_unscaling(float inv_scale) {
  HG_CHECK(can_step_unscaling(), name_,
           "step_unscaling needs a fused update and float32, contiguous CPU parameters and gradients");
  HG_CHECK(inv_scale > 0.0f && std::isfinite(inv_scale), name_,
           "step_unscaling: inv_scale must be finite and > 0, got {}", inv_scale);
  struct ClearFactor {
    float& factor;
    ~ClearFactor() { factor = 0.0f; }
  } clear{grad_unscale_};
  grad_unscale_ = inv_scale;
  update_each();
}

Tensor Optimizer::like_param(const Tensor& t, const Tensor& param) {
  const Tensor same = to(t, param.device(), param.dtype());
  return same.strides() == param.strides() ? same : contiguous(same, param.suggest_memory_format());
}

Tensor Optimizer::zeros_like_param(const Tensor& param) { return like_param(zeros_like(param), param); }

Tensor Optimizer::warm_cast_output(const Tensor& param) {
  const std::shared_ptr<WarmCast> warm = warm_cast_of(param);
  if (!warm || param.dtype() != kFloat32 || !internal::is_dense(param)) return Tensor();
  // In the parameter's layout: the kernel writes it as a flat array beside the parameter's.
  return empty(param.shape(), TensorOptions(warm->dtype).device(param.device()), param.suggest_memory_format());
}

void Optimizer::publish_warm_cast(const Tensor& param, const Tensor& value) {
  if (!value.defined()) return;
  const std::shared_ptr<WarmCast> warm = warm_cast_of(param);
  warm->value = value;
  warm->version = param.version();
}

Tensor Optimizer::skip_flag(Device device) const {
  if (!skip_flag_.defined() || skip_flag_.device() == device) return skip_flag_;
  return to(skip_flag_, device, kFloat32);
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t g = 0; g < group_lr_.size(); ++g) {
    out[group_key(g, "lr")] = scalar_tensor(group_lr_[g], kFloat64);
    for (const auto& [key, value] : const_cast<Optimizer*>(this)->hyperparameters(g))
      out[group_key(g, "hp." + key)] = scalar_tensor(value.get(), kFloat64);
  }
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
  const size_t groups = group_lr_.size();
  std::vector<std::map<std::string, Hyperparameter>> hps;
  std::set<std::string> expected = {"steps"};
  for (size_t g = 0; g < groups; ++g) {
    hps.push_back(hyperparameters(g));
    expected.insert(group_key(g, "lr"));
    for (const auto& [key, value] : hps.back()) expected.insert(group_key(g, "hp." + key));
  }
  for (const auto& [key, t] : state) {
    if (key.starts_with("state.")) {
      state_index(std::string_view(key).substr(6), state_.size(), name_, key);
      continue;
    }
    HG_CHECK(expected.count(key), name_,
             "load_state_dict: unexpected key '{}' (the optimizer has {} parameter group{})", key, groups,
             groups == 1 ? "" : "s");
  }
  std::vector<double> lrs(groups);
  std::vector<std::map<std::string, double>> values(groups);
  for (size_t g = 0; g < groups; ++g) {
    const std::string lr_key = group_key(g, "lr");
    lrs[g] = state_number(get(lr_key), name_, lr_key, 0.0, std::numeric_limits<double>::max());
    for (const auto& [key, value] : hps[g]) {
      const std::string hp_key = group_key(g, "hp." + key);
      values[g][key] = state_number(get(hp_key), name_, hp_key, std::numeric_limits<double>::lowest(),
                                    std::numeric_limits<double>::max());
    }
    check_hyperparameters(values[g]);
  }
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
  group_lr_ = lrs;
  for (size_t g = 0; g < groups; ++g)
    for (auto& [key, value] : hps[g]) value.set(values[g].at(key));
  steps_ = steps;
  state_ = std::move(loaded);
  for (size_t g = 0; g < groups; ++g) write_hyper(g);
}

}  // namespace hg::optim
