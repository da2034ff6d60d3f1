// What the cuDNN convolution path did, for tests and benchmarks: whether it runs through the
// graph API (cuDNN present and HG_CUDNN_LEGACY_API unset), how many execution plans it has built
// (one per shape, pass, dtype and alignment), how many passes it has executed with them, and how
// many shapes it handed to the legacy calls because cuDNN offered no acceptable engine.
#pragma once

#include <cstddef>

namespace hg::cuda::dnn {

struct ConvPlanStats {
  bool graph_api = false;
  std::size_t plans_built = 0;
  std::size_t executions = 0;
  std::size_t fallbacks = 0;
  std::size_t nondeterministic_plans = 0;  // built plans whose engine cuDNN notes as non-deterministic
};
ConvPlanStats conv_plan_stats();

}  // namespace hg::cuda::dnn
