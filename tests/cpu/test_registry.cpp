// Registry-driven checks: op names are unique, and every kernel stub the library defines has a
// CPU kernel unless it is declared optional (HG_DEFINE_OPTIONAL_STUB: the op falls back).
#include <set>

#include "framework/cuda_backend.h"
#include "framework/dispatch.h"
#include "framework/op.h"
#include "helpers.h"

TEST_CASE("op names are unique in the registry") {
  std::set<std::string> names;
  for (const hg::OpDef* op : hg::op_registry()) {
    CAPTURE(op->name);
    CHECK(names.insert(op->name).second);
  }
  CHECK(names.count("mm") == 1);
  CHECK(names.size() > 30);
}

TEST_CASE("the widened-gradient fast path is named by op traits: 'to' receives it, 'linear' and 'conv2d' write it") {
  std::set<std::string> casts, writers;
  for (const hg::OpDef* op : hg::op_registry()) {
    if (op->dtype_cast) casts.insert(op->name);
    if (op->writes_widened_gradients) writers.insert(op->name);
  }
  CHECK(casts == std::set<std::string>{"to"});
  CHECK(writers == std::set<std::string>{"linear", "conv2d"});
}

TEST_CASE("every kernel stub has a CPU kernel unless it is optional") {
  const auto& stubs = hg::stub_registry();
  REQUIRE(stubs.size() > 30);
  std::set<std::string> names;
  for (const hg::DispatchStubBase* stub : stubs) {
    CAPTURE(stub->name);
    CHECK(names.insert(stub->name).second);
    if (!stub->optional) CHECK_MESSAGE(stub->has(hg::kCPU), stub->name << " has no CPU kernel");
  }
  // The list comes from the stub definitions themselves, so it includes stubs no OpDef names.
  CHECK(names.count("gemm_stub") == 1);
  CHECK(names.count("sgd_update_stub") == 1);
  CHECK(names.count("unscale_grad_stub") == 1);
}

// Registration happens when the CUDA backend module is loaded (no GPU needed), so a CUDA build
// can be checked on a machine without a GPU. load_backend() opens it here, as first CUDA use would.
TEST_CASE("in a CUDA build, every stub with a CPU kernel has a CUDA kernel unless it is optional" *
          doctest::skip(!hg::cuda::load_backend())) {
  for (const hg::DispatchStubBase* stub : hg::stub_registry()) {
    CAPTURE(stub->name);
    if (stub->has(hg::kCPU) && !stub->optional)
      CHECK_MESSAGE(stub->has(hg::kCUDA), stub->name << " has no CUDA kernel");
  }
}
