// Registry-driven checks: every op is registered once and has a CPU kernel for each stub.
#include <set>

#include "framework/dispatch.h"
#include "framework/ops/copy_kernels.h"
#include "helpers.h"

TEST_CASE("every registered op has a CPU kernel for each of its stubs") {
  std::set<std::string> names;
  for (const hg::OpDef* op : hg::op_registry()) {
    CAPTURE(op->name);
    for (const hg::DispatchStubBase* stub : op->kernels) {
      if (std::string(stub->name) == "cross_device_copy_stub") continue;  // CPU<->CUDA only
      CHECK_MESSAGE(stub->has(hg::kCPU), stub->name << " has no CPU kernel");
    }
    names.insert(op->name);
  }
  CHECK(names.count("mm") == 1);
  CHECK(names.size() > 30);
}
