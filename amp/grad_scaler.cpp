#include "amp/grad_scaler.h"

#include <cmath>
#include <limits>
#include <vector>

#include "amp/device_support.h"
#include "amp/scaler_ops.h"
#include "framework/capture_state.h"
#include "framework/cuda.h"
#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "serialize/state_value.h"

namespace hg::amp {

namespace {
constexpr const char* kName = "GradScaler";

int device_key(Device d) { return static_cast<int>(d.type) * 4096 + d.index; }

void check_growth_factor(double f) {
  HG_CHECK(f > 1.0 && std::isfinite(f), kName, "growth_factor must be a finite number > 1, got {}", f);
}
void check_backoff_factor(double f) {
  HG_CHECK(f > 0.0 && f < 1.0, kName, "backoff_factor must be in (0, 1), got {}", f);
}
void check_growth_interval(int64_t n) {
  HG_CHECK(n >= 1 && n <= INT32_MAX, kName, "growth_interval must be at least 1, got {}", n);
}
void check_scale_value(double s) {
  HG_CHECK(s > 0.0 && std::isfinite(s) && s <= 3.4e38, kName, "the scale must be a finite positive float32, got {}", s);
}
}  // namespace

GradScaler::GradScaler(Device device, GradScalerOptions options)
    : device_(device), options_(options), enabled_(options.enabled) {
  check_scale_value(options.init_scale);
  check_growth_factor(options.growth_factor);
  check_backoff_factor(options.backoff_factor);
  check_growth_interval(options.growth_interval);
  if (enabled_ && device.is_cuda() && !cuda::is_available()) {
    warn_once_unavailable(kCUDA, "GradScaler");
    enabled_ = false;
  }
}

void GradScaler::check_scale_created(const char* what) const {
  HG_CHECK(scale_.defined(), kName,
           "{}() was called before scale(); call scaler.scale(loss).backward() first in each iteration", what);
}

GradScaler::OptimizerState& GradScaler::state_of(const optim::Optimizer& optimizer) {
  return per_optimizer_[&optimizer];
}

Tensor GradScaler::scale_on(Device device) { return device == device_ ? scale_ : to(scale_, device, kFloat32); }

Tensor GradScaler::scale(const Tensor& loss) {
  if (!enabled_) return loss;
  HG_CHECK(loss.defined(), kName, "scale() got an undefined tensor");
  if (!scale_.defined()) {
    NoGradGuard no_grad;
    scale_ = full({1}, options_.init_scale, TensorOptions(kFloat32).device(device_));
    growth_tracker_ = full({1}, static_cast<double>(init_growth_tracker_), TensorOptions(kInt32).device(device_));
  }
  Tensor s = scale_on(loss.device()).reshape({});
  return loss * s;
}

TensorList GradScaler::scale(const TensorList& losses) {
  TensorList out;
  out.reserve(losses.size());
  for (const Tensor& l : losses) out.push_back(scale(l));
  return out;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  check_scale_created("unscale_");
  OptimizerState& st = state_of(optimizer);
  HG_CHECK(st.stage != Stage::Unscaled, kName,
           "unscale_() was already called for this optimizer since the last update(); call it at most once per "
           "optimizer per iteration");
  HG_CHECK(st.stage != Stage::Stepped, kName,
           "unscale_() was called after step() for this optimizer; unscale_ (then clip), step, then update()");
  const TensorList& params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& g = params[i].grad();
    HG_CHECK(!g.defined() || g.dtype() != kFloat16, kName,
             "unscale_(): parameter {} (shape {}) has a float16 gradient; keep parameters in float32 (autocast "
             "makes the float16 copies) so the optimizer updates float32 master weights",
             i, params[i].shape());
  }
  NoGradGuard no_grad;
  std::map<int, Tensor> scales;
  std::map<int, TensorList> grads;  // per device: one multi-tensor unscale each
  for (const Tensor& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    const int key = device_key(g.device());
    Tensor& found = st.found_inf_per_device[key];
    if (!found.defined()) found = zeros({1}, TensorOptions(kFloat32).device(g.device()));
    Tensor& s = scales[key];
    if (!s.defined()) s = scale_on(g.device());
    grads[key].push_back(g);
  }
  for (const auto& [key, list] : grads) unscale_grads_(list, st.found_inf_per_device[key], scales[key]);
  // An optimizer without gradients still counts as checked (nothing was inf).
  if (st.found_inf_per_device.empty())
    st.found_inf_per_device[device_key(device_)] = zeros({1}, TensorOptions(kFloat32).device(device_));
  if (options_.process_group && options_.process_group->world_size() > 1) {
    // One collective per unscale_ on every rank (the per-device map may differ between ranks).
    capture::refuse_host_sync("GradScaler::unscale_", device_,
                              "all-reduce found_inf through the host for a process group (see docs/DISTRIBUTED.md)");
    Tensor any = to(found_inf_of(st), kCPU, kFloat32).contiguous().clone();
    options_.process_group->all_reduce(any, distributed::ReduceOp::Max).wait();
    for (auto& [key, flag] : st.found_inf_per_device) flag.copy_(to(any, flag.device(), kFloat32));
  }
  st.stage = Stage::Unscaled;
}

Tensor GradScaler::found_inf_of(const OptimizerState& st) {
  if (st.found_inf_per_device.size() == 1) return st.found_inf_per_device.begin()->second;
  NoGradGuard no_grad;
  Tensor total = zeros({1}, TensorOptions(kFloat32).device(device_));
  for (const auto& [key, flag] : st.found_inf_per_device) total.add_(to(flag, device_, kFloat32));
  return total;
}

void GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return;
  }
  check_scale_created("step");
  OptimizerState& st = state_of(optimizer);
  HG_CHECK(st.stage != Stage::Stepped, kName,
           "step() was already called for this optimizer since the last update(); call update() once per "
           "iteration, after every optimizer's step()");
  if (st.stage == Stage::Ready && step_unscaling(optimizer, st)) {
    st.stage = Stage::Stepped;
    return;
  }
  if (st.stage == Stage::Ready) unscale_(optimizer);
  optimizer.step(found_inf_of(st));
  st.stage = Stage::Stepped;
}

// step() without unscale_ first, on the CPU: the inf/NaN check reads only the gradients not
// already known finite (internal::known_all_finite: the widening of autocast's float16 copies'
// gradients notes it), and the optimizer multiplies each gradient by 1/scale inside its update,
// writing the product back. Gradients, parameters and state end as unscale_ then step() leave
// them (a skipped step unscales too). wide_mlp fp16 at batch 16 reads its 67M gradients once a
// step instead of twice (10 ms on a 2-vCPU Xeon). Returns false, having done nothing, where it
// does not apply.
bool GradScaler::step_unscaling(optim::Optimizer& optimizer, OptimizerState& st) {
  const bool distributed = options_.process_group && options_.process_group->world_size() > 1;
  if (!device_.is_cpu() || distributed || !optimizer.can_step_unscaling()) return false;
  NoGradGuard no_grad;
  TensorList grads, unchecked;
  for (const Tensor& p : optimizer.params()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    if (!internal::known_all_finite(g)) unchecked.push_back(g);
  }
  Tensor found = zeros({1}, TensorOptions(kFloat32).device(device_));
  if (!unchecked.empty()) find_non_finite(unchecked, found);
  st.found_inf_per_device[device_key(device_)] = found;
  if (*found.data_ptr<float>() != 0.0f) {
    unscale_grads_(grads, found, scale_);
    optimizer.step(found);  // skipped
    return true;
  }
  // The reciprocal as unscale_'s kernel takes it: in double, rounded to float32.
  optimizer.step_unscaling(static_cast<float>(1.0 / static_cast<double>(*scale_.data_ptr<float>())));
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  check_scale_created("update");
  HG_CHECK(!per_optimizer_.empty(), kName,
           "update() was called, but no optimizer was unscaled or stepped since the last update(); call "
           "scaler.step(optimizer) first");
  NoGradGuard no_grad;
  // The usual case, one optimizer whose gradients are on the scaler's device, passes its flag
  // as it is (the kernel only reads it); several flags are summed into a fresh one.
  std::vector<const Tensor*> flags;
  for (const auto& [opt, st] : per_optimizer_)
    for (const auto& [key, flag] : st.found_inf_per_device) flags.push_back(&flag);
  Tensor found;
  if (flags.size() == 1 && flags[0]->device() == device_) {
    found = *flags[0];
  } else {
    found = zeros({1}, TensorOptions(kFloat32).device(device_));
    for (const Tensor* flag : flags) found.add_(to(*flag, device_, kFloat32));
  }
  update_scale_(scale_, growth_tracker_, found, options_.growth_factor, options_.backoff_factor,
                options_.growth_interval);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  check_scale_created("update");
  check_scale_value(new_scale);
  NoGradGuard no_grad;
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

void GradScaler::update(const Tensor& new_scale) {
  if (!enabled_) return;
  check_scale_created("update");
  HG_CHECK(new_scale.defined() && new_scale.numel() == 1 && is_floating(new_scale.dtype()), kName,
           "update(new_scale) needs a one-element floating-point tensor");
  NoGradGuard no_grad;
  scale_.copy_(to(new_scale.detach().reshape({1}), device_, kFloat32));
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

int64_t GradScaler::get_growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : init_growth_tracker_;
}

void GradScaler::set_growth_factor(double f) {
  check_growth_factor(f);
  options_.growth_factor = f;
}
void GradScaler::set_backoff_factor(double f) {
  check_backoff_factor(f);
  options_.backoff_factor = f;
}
void GradScaler::set_growth_interval(int64_t n) {
  check_growth_interval(n);
  options_.growth_interval = n;
}

StateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {
      {"scale", scalar_tensor(get_scale(), kFloat64)},
      {"growth_factor", scalar_tensor(options_.growth_factor, kFloat64)},
      {"backoff_factor", scalar_tensor(options_.backoff_factor, kFloat64)},
      {"growth_interval", scalar_tensor(static_cast<double>(options_.growth_interval), kInt64)},
      {"growth_tracker", scalar_tensor(static_cast<double>(get_growth_tracker()), kInt64)},
  };
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!enabled_) return;
  HG_CHECK(!state.empty(), kName,
           "load_state_dict() got an empty state dict; was it saved from a disabled GradScaler?");
  static constexpr const char* kKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                                          "growth_tracker"};
  for (const auto& [key, value] : state) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    HG_CHECK(known, kName, "load_state_dict(): unexpected key '{}'", key);
    HG_CHECK(value.defined() && value.numel() == 1, kName, "load_state_dict(): '{}' must hold one value", key);
  }
  auto get = [&](const char* key) -> const Tensor& {
    auto it = state.find(key);
    HG_CHECK(it != state.end(), kName, "load_state_dict(): missing key '{}'", key);
    return it->second;
  };
  // Range-checked before any cast: a NaN or 1e300 must not reach an int64 conversion.
  constexpr double kMax = std::numeric_limits<double>::max();
  constexpr int64_t kMaxCount = int64_t{1} << 53;
  const double scale = state_number(get("scale"), kName, "scale", -kMax, kMax);
  const double growth = state_number(get("growth_factor"), kName, "growth_factor", -kMax, kMax);
  const double backoff = state_number(get("backoff_factor"), kName, "backoff_factor", -kMax, kMax);
  const int64_t interval = state_count(get("growth_interval"), kName, "growth_interval", 1, kMaxCount);
  const int64_t tracker = state_count(get("growth_tracker"), kName, "growth_tracker", 0, kMaxCount);
  check_scale_value(scale);
  check_growth_factor(growth);
  check_backoff_factor(backoff);
  check_growth_interval(interval);
  HG_CHECK(tracker >= 0 && tracker < interval, kName,
           "load_state_dict(): growth_tracker {} must be in [0, growth_interval {})", tracker, interval);
  options_.growth_factor = growth;
  options_.backoff_factor = backoff;
  options_.growth_interval = interval;
  NoGradGuard no_grad;
  if (scale_.defined()) {
    scale_.fill_(scale);
    growth_tracker_.fill_(static_cast<double>(tracker));
  } else {
    options_.init_scale = scale;
    init_growth_tracker_ = tracker;
  }
}

}  // namespace hg::amp
