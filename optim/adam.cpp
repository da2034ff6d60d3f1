#include "optim/adam.h"

#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/optim_update_kernels.h"
#include "serialize/state_value.h"

namespace hg::optim {

namespace {
std::vector<AdamWParamGroup> one_group(TensorList params, AdamWOptions options) {
  return {AdamWParamGroup{std::move(params), options}};
}
std::vector<AdamParamGroup> adam_groups(std::vector<AdamWParamGroup> groups) {
  std::vector<AdamParamGroup> out;
  for (AdamWParamGroup& g : groups) out.push_back({std::move(g.params), g.options.adam()});
  return out;
}
}  // namespace

Adam::Adam(TensorList params, AdamOptions options)
    : Adam(std::vector<AdamParamGroup>{{std::move(params), options}}, "Adam", false) {}

Adam::Adam(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), "Adam", false) {}

AdamW::AdamW(TensorList params, AdamWOptions options)
    : Adam(adam_groups(one_group(std::move(params), options)), "AdamW", true) {}

AdamW::AdamW(std::vector<AdamWParamGroup> groups) : Adam(adam_groups(std::move(groups)), "AdamW", true) {}

Adam::Adam(std::vector<AdamParamGroup> groups, const char* name, bool decoupled)
    : Optimizer(name), decoupled_(decoupled) {
  HG_CHECK(!groups.empty(), name, "needs at least one parameter group");
  for (AdamParamGroup& g : groups) add_param_group(std::move(g));
}

void Adam::add_param_group(AdamParamGroup group) {
  const AdamOptions& o = group.options;
  check_adam(name(), o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad ? 1 : 0);
  add_group(std::move(group.params), o.lr);
  options_.push_back(o);
  step_.resize(params().size(), 0);
  device_step_.resize(params().size());
}

AdamOptions Adam::options(size_t group) const {
  const double group_lr = lr(group);  // checks the group index
  AdamOptions o = options_[group];
  o.lr = group_lr;
  return o;
}

void Adam::check_adam(const char* name, double beta1, double beta2, double eps, double weight_decay, double amsgrad) {
  HG_CHECK(eps >= 0, name, "invalid eps {}", eps);
  HG_CHECK(beta1 >= 0 && beta1 < 1, name, "invalid beta1 {} (must be in [0, 1))", beta1);
  HG_CHECK(beta2 >= 0 && beta2 < 1, name, "invalid beta2 {} (must be in [0, 1))", beta2);
  HG_CHECK(weight_decay >= 0, name, "invalid weight_decay {}", weight_decay);
  HG_CHECK(amsgrad == 0 || amsgrad == 1, name, "invalid amsgrad {} (expected 0 or 1)", amsgrad);
}

void Adam::check_hyperparameters(const std::map<std::string, double>& v) const {
  check_adam(name(), v.at("beta1"), v.at("beta2"), v.at("eps"), v.at("weight_decay"), v.at("amsgrad"));
}

std::map<std::string, Optimizer::Hyperparameter> Adam::hyperparameters(size_t group) {
  AdamOptions& o = options_.at(group);
  return {{"beta1", &o.beta1},
          {"beta2", &o.beta2},
          {"eps", &o.eps},
          {"weight_decay", &o.weight_decay},
          {"amsgrad", &o.amsgrad}};
}

// The fused kernel is the one implementation of the update. A strided parameter that is not dense
// (a view into a larger tensor) is updated through a contiguous copy: copy in, fused update, copy
// back. A channels-last one is updated in place (internal::is_dense), its state kept in its layout.
void Adam::update(size_t i, const Tensor& param, const Tensor& grad) {
  if (internal::is_dense(param)) return update_fused(i, param, grad);
  const Tensor dense = contiguous(param);
  update_fused(i, dense, grad);
  Tensor(param).copy_(dense);
}

StateDict Adam::state_dict() const {
  StateDict out = Optimizer::state_dict();
  for (size_t i = 0; i < step_.size(); ++i)
    if (const int64_t s = step_of(i))
      out[fmt::format("state.{}.step", i)] = scalar_tensor(static_cast<double>(s), kInt64);
  return out;
}

void Adam::load_state_dict(const StateDict& state) {
  StateDict rest;
  std::vector<int64_t> steps(step_.size(), 0);
  for (const auto& [key, t] : state) {
    if (key.starts_with("state.") && key.ends_with(".step")) {
      const size_t index = state_index(std::string_view(key).substr(6), steps.size(), name(), key);
      steps[index] = state_count(t, name(), key, 0, int64_t{1} << 53);
    } else {
      rest[key] = t;
    }
  }
  Optimizer::load_state_dict(rest);
  step_ = steps;
  device_step_.assign(step_.size(), Tensor());
}

int64_t Adam::step_of(size_t i) const { return device_step_[i].defined() ? device_step_[i].item<int64_t>() : step_[i]; }

void Adam::prepare_state(size_t i, const Tensor& param) {
  auto& st = state_[i];
  const AdamOptions& o = options_[group_of(i)];
  if (!st.count("exp_avg")) {
    st["exp_avg"] = zeros_like_param(param);
    st["exp_avg_sq"] = zeros_like_param(param);
    if (o.amsgrad) st["max_exp_avg_sq"] = zeros_like_param(param);
  }
  if (o.amsgrad && !st.count("max_exp_avg_sq")) st["max_exp_avg_sq"] = zeros_like_param(param);
  // Moments loaded from another dtype, device or layout are converted once, to what the kernel reads.
  for (const char* key : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    auto it = st.find(key);
    if (it == st.end()) continue;
    if (it->second.strides() != param.strides() || it->second.dtype() != param.dtype() ||
        it->second.device() != param.device())
      it->second = like_param(it->second, param);
  }
}

Tensor Adam::step_tensor(size_t i, const Tensor& param) {
  Tensor& s = device_step_[i];
  if (!s.defined() || s.device() != param.device())
    s = full({1}, static_cast<double>(step_of(i)), TensorOptions(kInt64).device(param.device()));
  return s;
}

// One fused kernel per parameter. On CUDA it reads the skip flag and advances the step on the
// device (on the CPU the kernel advances the same kind of one-element tensor).
void Adam::update_fused(size_t i, const Tensor& param, const Tensor& grad) {
  HG_CHECK(internal::is_dense(param), name(), "parameter {} must be dense on {} (shape {}, strides {})", i,
           param.device(), param.shape(), param.strides());
  const Tensor g = like_param(grad, param);
  const size_t group = group_of(i);
  const AdamOptions& o = options_[group];
  prepare_state(i, param);
  auto& st = state_[i];
  const Tensor step = step_tensor(i, param);
  const Tensor vmax = o.amsgrad ? st["max_exp_avg_sq"] : Tensor();
  const Tensor cast_out = warm_cast_output(param);
  adam_update_stub(
      param.device().type, param, g, st["exp_avg"], st["exp_avg_sq"], vmax, step, skip_flag(param.device()), cast_out,
      AdamHyper{lr(group), o.beta1, o.beta2, o.eps, o.weight_decay, decoupled_, o.amsgrad, grad_unscale()});
  param.bump_version();
  publish_warm_cast(param, cast_out);
}

std::vector<double> Adam::kernel_hyperparameters(size_t group) const {
  const AdamOptions& o = options_.at(group);
  std::vector<double> v(kAdamHyperSize);
  v[kAdamLr] = lr(group);
  v[kAdamBeta1] = o.beta1;
  v[kAdamBeta2] = o.beta2;
  v[kAdamEps] = o.eps;
  v[kAdamWeightDecay] = o.weight_decay;
  return v;
}

// One multi-tensor kernel call for the listed parameters (one group, device and dtype): the
// learning rate and the other options come from the group's hyper tensor on that device.
void Adam::update_multi(size_t group, const std::vector<size_t>& indices) {
  const bool amsgrad = options_[group].amsgrad;
  TensorList ps, grads, m, v, vmax, steps, casts;
  for (size_t i : indices) {
    const Tensor& p = params()[i];
    prepare_state(i, p);
    auto& st = state_[i];
    ps.push_back(p);
    grads.push_back(contiguous(to(p.grad(), p.device(), p.dtype())));
    m.push_back(st["exp_avg"]);
    v.push_back(st["exp_avg_sq"]);
    if (amsgrad) vmax.push_back(st["max_exp_avg_sq"]);
    steps.push_back(step_tensor(i, p));
    casts.push_back(warm_cast_output(p));
  }
  const Device device = ps.front().device();
  adam_multi_update_stub(device.type, ps, grads, m, v, vmax, steps, skip_flag(device), casts,
                         hyper_tensor(group, device), decoupled_, grad_unscale());
  for (size_t k = 0; k < ps.size(); ++k) {
    ps[k].bump_version();
    publish_warm_cast(ps[k], casts[k]);
  }
}

}  // namespace hg::optim
