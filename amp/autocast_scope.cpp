#include "amp/autocast_scope.h"

#include "amp/cast_cache.h"
#include "amp/device_support.h"
#include "framework/cuda.h"
#include "framework/error.h"

namespace hg::amp {

namespace {
thread_local int t_nesting = 0;

void check_dtype(DeviceType device, Dtype dtype) {
  HG_CHECK(dtype == kFloat16 || dtype == kBFloat16, "autocast",
           "{} autocast supports float16 and bfloat16, got {}; for float32 everywhere, leave autocast off "
           "(or pass enabled=false)",
           device, dtype);
}

// Applies a region's request to this thread's settings for its device type.
void enter(DeviceType device, std::optional<Dtype> dtype, bool enabled, bool cache_enabled) {
  const Dtype d = dtype.value_or(default_autocast_dtype(device));
  check_dtype(device, d);
  if (enabled && device == kCUDA && !cuda::is_available()) {
    warn_once_unavailable(device, "autocast");
    enabled = false;
  }
  autocast_state()[device] = AutocastDeviceState{enabled, d, cache_enabled};
  ++t_nesting;
}

void leave(DeviceType device, const AutocastDeviceState& saved) {
  autocast_state()[device] = saved;
  if (--t_nesting == 0) clear_cast_cache();
}
}  // namespace

Dtype default_autocast_dtype(DeviceType device) { return device == kCUDA ? kFloat16 : kBFloat16; }

AutocastGuard::AutocastGuard(DeviceType device, std::optional<Dtype> dtype, bool enabled, bool cache_enabled)
    : device_(device), saved_(autocast_state()[device]) {
  enter(device, dtype, enabled, cache_enabled);
}

AutocastGuard::AutocastGuard(const AutocastScope& s) : AutocastGuard(s.device, s.dtype, s.enabled, s.cache_enabled) {}

AutocastGuard::~AutocastGuard() { leave(device_, saved_); }

AutocastContext set_autocast(DeviceType device, std::optional<Dtype> dtype, bool enabled, bool cache_enabled) {
  AutocastContext ctx;
  ctx.device_ = device;
  ctx.saved_ = autocast_state()[device];
  enter(device, dtype, enabled, cache_enabled);
  ctx.active_ = true;
  ctx.depth_ = t_nesting;
  ctx.thread_ = std::this_thread::get_id();
  return ctx;
}

void unset_autocast(AutocastContext& ctx) {
  HG_CHECK(ctx.active_, "unset_autocast", "this context was already unset (or never set by set_autocast)");
  // Regions are LIFO: restoring an outer context while an inner one (or a guard) is still open
  // would leave the inner one restoring stale settings later. Refuse, changing nothing.
  HG_CHECK(ctx.thread_ == std::this_thread::get_id(), "unset_autocast",
           "this context was set on another thread; unset it on the thread that set it");
  HG_CHECK(ctx.depth_ == t_nesting, "unset_autocast",
           "contexts must be unset in reverse order of setting: this one was set at nesting depth {}, but {} "
           "region(s) are open; unset the inner ones first",
           ctx.depth_, t_nesting);
  ctx.active_ = false;
  leave(ctx.device_, ctx.saved_);
}

bool is_autocast_enabled(DeviceType device) { return autocast_state()[device].enabled; }
Dtype get_autocast_dtype(DeviceType device) { return autocast_state()[device].dtype; }
bool is_autocast_cache_enabled(DeviceType device) { return autocast_state()[device].cache_enabled; }
int autocast_nesting_depth() { return t_nesting; }

}  // namespace hg::amp
