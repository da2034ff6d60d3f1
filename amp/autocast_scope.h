// Autocast scopes: the RAII guard, with_autocast, set_autocast/unset_autocast, the function
// wrapper, and the queries. They only edit this thread's autocast settings (kept by the tensor
// core in framework/autocast_state.h) and the nesting counter that bounds the cast cache.
#pragma once

#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "framework/autocast_state.h"
#include "framework/device.h"
#include "framework/dtype.h"

namespace hg::amp {

// The lower-precision dtype a region on `device` uses when none is given:
// bfloat16 on cpu, float16 on cuda.
Dtype default_autocast_dtype(DeviceType device);

// What one region asks for. A value: keep it and enter it as often as you like, nested or not.
struct AutocastScope {
  DeviceType device = kCPU;
  std::optional<Dtype> dtype;  // empty: default_autocast_dtype(device)
  bool enabled = true;         // a runtime value; false turns autocast off inside the region
  bool cache_enabled = true;   // false: no cast cache for weights inside the region
};

// Enters a region on construction and restores everything on destruction. Throws hg::Error
// when `dtype` is not float16 or bfloat16. cuda on a machine without a CUDA device warns once
// and leaves autocast off (the region still nests and restores normally).
class [[nodiscard]] AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device, std::optional<Dtype> dtype = std::nullopt, bool enabled = true,
                         bool cache_enabled = true);
  explicit AutocastGuard(const AutocastScope& scope);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  AutocastDeviceState saved_;
};

// The handle set_autocast returns; unset_autocast restores enabled, dtype and cache_enabled.
class AutocastContext {
 public:
  DeviceType device() const { return device_; }
  bool active() const { return active_; }

 private:
  friend AutocastContext set_autocast(DeviceType, std::optional<Dtype>, bool, bool);
  friend void unset_autocast(AutocastContext&);
  DeviceType device_ = kCPU;
  AutocastDeviceState saved_;
  bool active_ = false;
  int depth_ = 0;           // this thread's nesting depth just after set_autocast
  std::thread::id thread_;  // the thread that set it
};

// The two halves of a guard, for code that cannot use a scope (callbacks, bindings). Contexts
// must be unset in reverse order of setting, on the thread that set them: unsetting one out of
// order, from another thread, or twice throws hg::Error and leaves the autocast state unchanged.
AutocastContext set_autocast(DeviceType device, std::optional<Dtype> dtype = std::nullopt, bool enabled = true,
                             bool cache_enabled = true);
void unset_autocast(AutocastContext& context);

// Runs fn() inside the region and returns its result (the region ends on exceptions too).
template <class Fn>
decltype(auto) with_autocast(const AutocastScope& scope, Fn&& fn) {
  AutocastGuard guard(scope);
  return std::forward<Fn>(fn)();
}
template <class Fn>
decltype(auto) with_autocast(DeviceType device, std::optional<Dtype> dtype, Fn&& fn) {
  return with_autocast(AutocastScope{device, dtype}, std::forward<Fn>(fn));
}

// Wraps f so that every call runs inside the region (the decorator form). The result can be
// called many times, recursively, and from several threads (each call has its own region).
template <class Fn>
auto autocast_fn(const AutocastScope& scope, Fn f) {
  return [scope, f = std::move(f)](auto&&... args) -> decltype(auto) {
    AutocastGuard guard(scope);
    return f(std::forward<decltype(args)>(args)...);
  };
}
template <class Fn>
auto autocast_fn(DeviceType device, std::optional<Dtype> dtype, Fn f) {
  return autocast_fn(AutocastScope{device, dtype}, std::move(f));
}

// This thread's settings for a device type.
bool is_autocast_enabled(DeviceType device);
Dtype get_autocast_dtype(DeviceType device);
bool is_autocast_cache_enabled(DeviceType device);
// How many regions (of any device type, enabled or not) this thread is inside.
int autocast_nesting_depth();

}  // namespace hg::amp
