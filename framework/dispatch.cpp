#include "framework/dispatch.h"

namespace hg {

void DispatchStubBase::missing(DeviceType d) const {
  if (d == kCUDA) fail(name, "has no CUDA implementation (was halfgrad built with CUDA support?)");
  fail(name, "has no {} implementation", d);
}

}  // namespace hg
