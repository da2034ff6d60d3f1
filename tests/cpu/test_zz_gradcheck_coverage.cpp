// Runs last (doctest orders test files by name): every differentiable op in the registry must
// have been exercised by autograd::gradcheck somewhere in the suite. Only meaningful when the
// whole suite ran, so meson's `cpu` test turns it on with HG_CHECK_GRADCHECK_COVERAGE=1.
#include <cstdlib>

#include "helpers.h"

TEST_CASE("every differentiable op is covered by a gradcheck test") {
  if (!std::getenv("HG_CHECK_GRADCHECK_COVERAGE")) {
    MESSAGE("skipped: set HG_CHECK_GRADCHECK_COVERAGE=1 and run the whole suite");
    return;
  }
  const auto checked = hg::autograd::gradchecked_ops();
  std::vector<std::string> missing;
  for (const hg::OpDef* op : hg::op_registry()) {
    if (op->differentiable && !checked.count(op->name)) missing.push_back(op->name);
  }
  CHECK_MESSAGE(missing.empty(), "differentiable ops without a gradcheck: " << fmt::format("{}", missing));
}
