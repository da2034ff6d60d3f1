// Kernel dispatch: a DispatchStub per kernel holds one function per device type (filled by
// kernels/cpu and kernels/cuda at load time), and dispatch_dtype turns a runtime Dtype into a
// C++ type for templated kernel code.
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/error.h"

namespace hg {

struct DispatchStubBase {
  const char* name;
  // A backend may leave an optional stub empty: the op checks has() and falls back to other
  // kernels. Every other stub must be filled by every backend that is built.
  bool optional = false;
  void* fns[kNumDeviceTypes] = {};

  constexpr explicit DispatchStubBase(const char* n, bool opt = false) : name(n), optional(opt) {}
  bool has(DeviceType d) const { return fns[static_cast<int>(d)] != nullptr; }
  [[noreturn]] void missing(DeviceType d) const;
};

template <class Fn>
class DispatchStub;

template <class R, class... Args>
class DispatchStub<R (*)(Args...)> : public DispatchStubBase {
 public:
  using Fn = R (*)(Args...);
  constexpr explicit DispatchStub(const char* n, bool opt = false) : DispatchStubBase(n, opt) {}
  void set(DeviceType d, Fn f) { fns[static_cast<int>(d)] = reinterpret_cast<void*>(f); }
  R operator()(DeviceType d, Args... args) const {
    void* f = fns[static_cast<int>(d)];
    if (!f) [[unlikely]]
      missing(d);
    return reinterpret_cast<Fn>(f)(std::forward<Args>(args)...);
  }
};

// Every stub defined with HG_DEFINE_STUB / HG_DEFINE_OPTIONAL_STUB, in load order: the registry
// tests check that each backend built fills every stub that is not optional.
const std::vector<const DispatchStubBase*>& stub_registry();
bool list_stub(const DispatchStubBase* stub);

#define HG_CONCAT_INNER(a, b) a##b
#define HG_CONCAT(a, b) HG_CONCAT_INNER(a, b)
// In a framework header: HG_DECLARE_STUB(add_stub, void (*)(Tensor&, const Tensor&, const Tensor&));
#define HG_DECLARE_STUB(name, fn_type) extern ::hg::DispatchStub<fn_type> name
// In the framework .cpp that owns the op.
#define HG_DEFINE_STUB(name, fn_type)                \
  constinit ::hg::DispatchStub<fn_type> name{#name}; \
  [[maybe_unused]] static const bool HG_CONCAT(hg_listed_, name) = ::hg::list_stub(&name)
// A stub the op can do without on some backend (it checks has() and falls back).
#define HG_DEFINE_OPTIONAL_STUB(name, fn_type)             \
  constinit ::hg::DispatchStub<fn_type> name{#name, true}; \
  [[maybe_unused]] static const bool HG_CONCAT(hg_listed_, name) = ::hg::list_stub(&name)
// In a kernel .cpp: HG_REGISTER_KERNEL(add_stub, kCPU, add_cpu);
#define HG_REGISTER_KERNEL(stub, device, fn) \
  [[maybe_unused]] static const bool HG_CONCAT(hg_registered_, __LINE__) = ((stub).set(device, fn), true)

template <class T>
struct TypeTag {
  using type = T;
};

// Throws "[op] <dtype> is a storage and cast dtype ..." for a float8 dtype reaching a kernel that
// only dispatch_any_dtype's callers (casts, fill, item, copies) take; named by the public op this
// thread is running, else by `op`.
[[noreturn]] void refuse_float8(Dtype dtype, std::string_view op = {});

// Calls f(TypeTag<T>{}) for the C++ type of `dtype`. The float8 dtypes are refused by name
// (refuse_float8), so generic kernels never instantiate for them.
template <class F>
decltype(auto) dispatch_dtype(Dtype dtype, F&& f) {
  switch (dtype) {
    case kFloat32: return f(TypeTag<float>{});
    case kFloat16: return f(TypeTag<Half>{});
    case kBFloat16: return f(TypeTag<BFloat16>{});
    case kFloat64: return f(TypeTag<double>{});
    case kInt64: return f(TypeTag<int64_t>{});
    case kInt32: return f(TypeTag<int32_t>{});
    case kUInt8: return f(TypeTag<uint8_t>{});
    case kBool: return f(TypeTag<bool>{});
    case kFloat8E4M3:
    case kFloat8E5M2: refuse_float8(dtype);
  }
  return f(TypeTag<float>{});
}

// dispatch_dtype with the float8 types too: for the kernels that only move and convert values.
template <class F>
decltype(auto) dispatch_any_dtype(Dtype dtype, F&& f) {
  switch (dtype) {
    case kFloat8E4M3: return f(TypeTag<Float8E4M3>{});
    case kFloat8E5M2: return f(TypeTag<Float8E5M2>{});
    default: return dispatch_dtype(dtype, std::forward<F>(f));
  }
}

// Like dispatch_dtype for the four floating dtypes; other dtypes throw naming the op.
template <class F>
decltype(auto) dispatch_floating(Dtype dtype, std::string_view op, F&& f) {
  switch (dtype) {
    case kFloat32: return f(TypeTag<float>{});
    case kFloat16: return f(TypeTag<Half>{});
    case kBFloat16: return f(TypeTag<BFloat16>{});
    case kFloat64: return f(TypeTag<double>{});
    case kFloat8E4M3:
    case kFloat8E5M2: refuse_float8(dtype, op);
    default: fail(op, "expected a floating-point tensor, got {}", dtype);
  }
}

}  // namespace hg
