#include "rounds.h"

#include <algorithm>
#include <stdexcept>

namespace amp_bench {

double median_of_finite(std::vector<double> values) {
  std::erase_if(values, [](double v) { return !std::isfinite(v); });
  return values.empty() ? kNaN : percentile(std::move(values), 50);
}

namespace {

// One side over the rounds where it ran (at least one).
SideResult combine_side(const std::vector<const SideResult*>& sides, int64_t batch) {
  for (const SideResult* r : sides)
    if (!r->ok()) return *r;  // the first round that failed says why
  SideResult out = *sides.front();
  const auto median_of = [&](double Summary::*field) {
    std::vector<double> v;
    for (const SideResult* r : sides) v.push_back(r->step_ms.*field);
    return median_of_finite(v);
  };
  Summary& s = out.step_ms;
  s.median = median_of(&Summary::median);
  s.p10 = median_of(&Summary::p10);
  s.p90 = median_of(&Summary::p90);
  s.mean = median_of(&Summary::mean);
  s.count = 0;
  out.steps = 0;
  for (const SideResult* r : sides) {
    s.min = std::min(s.min, r->step_ms.min);
    s.max = std::max(s.max, r->step_ms.max);
    s.count += r->step_ms.count;
    out.steps += r->steps;
  }
  out.samples_per_s = static_cast<double>(batch) / (s.median / 1000.0);
  return out;
}

}  // namespace

std::vector<CellResult> combine_rounds(const std::vector<std::vector<CellResult>>& rounds) {
  if (rounds.empty()) throw std::invalid_argument("combine_rounds: no rounds");
  const std::vector<CellResult>& first = rounds.front();
  std::vector<CellResult> out;
  for (size_t i = 0; i < first.size(); ++i) {
    std::vector<const SideResult*> hg, torch;
    CellResult c = first[i];
    c.rounds.clear();
    for (const auto& round : rounds) {
      if (round.size() != first.size() || round[i].model != c.model || round[i].precision != c.precision ||
          round[i].device != c.device)
        throw std::invalid_argument("combine_rounds: the rounds ran different plans");
      const CellResult& r = round[i];
      hg.push_back(&r.hg);
      if (r.torch) torch.push_back(&*r.torch);
      RoundFigures f;
      if (r.hg.ok()) f.hg_median_ms = r.hg.step_ms.median;
      if (r.torch && r.torch->ok()) f.torch_median_ms = r.torch->step_ms.median;
      f.speedup_vs_fp32 = r.speedup_vs_fp32;
      f.hg_over_torch = r.hg_over_torch;
      f.torch_speedup_vs_fp32 = r.torch_speedup_vs_fp32;
      c.rounds.push_back(f);
    }
    if (rounds.size() > 1) {
      c.hg = combine_side(hg, c.batch);
      if (!torch.empty()) c.torch = combine_side(torch, c.batch);
      const auto median_ratio = [&](double RoundFigures::*field) {
        std::vector<double> v;
        for (const RoundFigures& f : c.rounds) v.push_back(f.*field);
        return median_of_finite(v);
      };
      c.speedup_vs_fp32 = median_ratio(&RoundFigures::speedup_vs_fp32);
      c.hg_over_torch = median_ratio(&RoundFigures::hg_over_torch);
      c.torch_speedup_vs_fp32 = median_ratio(&RoundFigures::torch_speedup_vs_fp32);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace amp_bench
