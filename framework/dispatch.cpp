#include "framework/dispatch.h"

#include "framework/cuda.h"
#include "framework/cuda_backend.h"
#include "framework/op.h"

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

void refuse_float8(Dtype dtype, std::string_view op) {
  // The public op the user called names it best (a kernel's own label may be generic).
  const std::string_view running = current_op_name();
  if (!running.empty()) op = running;
  fail(op.empty() ? std::string_view("kernel") : op,
       "{} is a storage and cast dtype: this op does not compute in it; cast with to() to bfloat16 or "
       "float32 first (fp8 GEMMs run inside amp::Fp8Autocast)",
       dtype);
}

void DispatchStubBase::missing(DeviceType d) const {
  if (d == kCUDA) {
    // CUDA tensors load the backend when they are allocated, so a kernel is only missing here
    // when the backend is absent or does not implement this stub.
    if (!cuda::load_backend()) fail(name, "has no CUDA implementation: {}", cuda::backend_error());
    if (has(d)) fail(name, "was looked up before the CUDA backend was loaded; call it again");
    fail(name, "has no CUDA implementation (was halfgrad built with CUDA support?)");
  }
  fail(name, "has no {} implementation", d);
}

}  // namespace hg
