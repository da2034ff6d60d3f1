// The cpu suite's main: runs doctest, then, when the whole suite ran (no filter on the command
// line), fails unless every differentiable op's backward was reached by some gradcheck, and
// every op whose backward is differentiable (OpDef::double_differentiable) by some gradgradcheck.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halfgrad.h>

#include <string>
#include <vector>

#include "framework/op.h"

namespace {
// Every differentiable op in the registry that no gradcheck in this run reached.
std::vector<std::string> ops_without_gradcheck() {
  const auto checked = hg::autograd::gradchecked_ops();
  std::vector<std::string> missing;
  for (const hg::OpDef* op : hg::op_registry())
    if (op->differentiable && !checked.count(op->name)) missing.push_back(op->name);
  return missing;
}
// The same for second derivatives; the ops that refuse double backward are listed (and tested)
// in test_higher_order.cpp.
std::vector<std::string> ops_without_gradgradcheck() {
  const auto checked = hg::autograd::gradgradchecked_ops();
  std::vector<std::string> missing;
  for (const hg::OpDef* op : hg::op_registry())
    if (op->differentiable && op->double_differentiable && !checked.count(op->name)) missing.push_back(op->name);
  return missing;
}
}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  if (argc > 1) {
    fmt::print("gradcheck coverage: skipped (a filtered or listing run; run the suite without arguments)\n");
    return status;
  }
  const std::vector<std::string> missing = ops_without_gradcheck();
  if (!missing.empty()) {
    fmt::print("gradcheck coverage: FAILED, differentiable ops no gradcheck reached: {}\n", fmt::join(missing, ", "));
    return 1;
  }
  fmt::print("gradcheck coverage: every differentiable op ({} checked) was reached by a gradcheck\n",
             hg::autograd::gradchecked_ops().size());
  const std::vector<std::string> missing2 = ops_without_gradgradcheck();
  if (!missing2.empty()) {
    fmt::print("gradgradcheck coverage: FAILED, ops with a differentiable backward no gradgradcheck reached: {}\n",
               fmt::join(missing2, ", "));
    return 1;
  }
  fmt::print("gradgradcheck coverage: every op with a differentiable backward ({} checked) was reached\n",
             hg::autograd::gradgradchecked_ops().size());
  return status;
}
