// Step-time statistics: percentiles (linear interpolation between order statistics, as numpy's
// default) and the summary each benchmark cell reports.
#pragma once

#include <vector>

namespace amp_bench {

// The q-th percentile (q in [0, 100]) of `values`; throws std::invalid_argument when empty or
// when q is out of range.
double percentile(std::vector<double> values, double q);

struct Summary {
  double median = 0, p10 = 0, p90 = 0, mean = 0, min = 0, max = 0;
  int count = 0;
};

Summary summarize(const std::vector<double>& values);

}  // namespace amp_bench
