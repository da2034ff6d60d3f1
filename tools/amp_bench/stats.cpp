// Percentiles and summaries of step times.
#include "stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace amp_bench {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) throw std::invalid_argument("percentile of no values");
  if (!(q >= 0 && q <= 100)) throw std::invalid_argument("percentile outside [0, 100]");
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Summary summarize(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  s.count = static_cast<int>(values.size());
  s.median = percentile(values, 50);
  s.p10 = percentile(values, 10);
  s.p90 = percentile(values, 90);
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  const auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  s.min = *mn;
  s.max = *mx;
  return s;
}

}  // namespace amp_bench
