#include "framework/dispatch.h"

namespace hg {

namespace {
std::vector<const DispatchStubBase*>& stubs() {
  static std::vector<const DispatchStubBase*> all;
  return all;
}
}  // namespace

const std::vector<const DispatchStubBase*>& stub_registry() { return stubs(); }
bool list_stub(const DispatchStubBase* stub) {
  stubs().push_back(stub);
  return true;
}

void DispatchStubBase::missing(DeviceType d) const {
  if (d == kCUDA) fail(name, "has no CUDA implementation (was halfgrad built with CUDA support?)");
  fail(name, "has no {} implementation", d);
}

}  // namespace hg
