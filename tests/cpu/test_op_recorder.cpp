// hg::OpRecorder's timings: each event's wall time, and the per-op totals a profile reads.
#include <algorithm>
#include <chrono>

#include "helpers.h"

using namespace hg;

TEST_CASE("OpRecorder times each op and sums the times per op and pass") {
  const Tensor a = randn({256, 256}), b = randn({256, 256});
  Tensor w = randn({256, 256}).requires_grad_();
  OpRecorder rec;
  Tensor y;
  for (int i = 0; i < 3; ++i) y = mm(a, b) + mm(a, w);
  y.sum().backward();

  for (const OpEvent& e : rec.events()) CHECK(e.micros >= 0);
  const auto totals = rec.totals();
  // Sorted by total time, largest first, and every event counted once.
  size_t events = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    events += totals[i].calls;
    if (i > 0) CHECK(totals[i - 1].micros >= totals[i].micros);
  }
  CHECK(events == rec.events().size());
  auto find = [&](std::string_view name, bool backward) {
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const OpRecorder::Total& t) { return t.name == name && t.backward == backward; });
    REQUIRE(it != totals.end());
    return *it;
  };
  const auto forward_mm = find("mm", false);
  CHECK(forward_mm.calls == 6);
  double sum = 0;
  for (const OpEvent& e : rec.events())
    if (e.name == "mm" && !e.backward) sum += e.micros;
  CHECK(forward_mm.micros == doctest::Approx(sum));
  // A 256^3 product takes microseconds, not nothing; the backward's mm for w is counted apart.
  CHECK(forward_mm.micros > 0);
  CHECK(find("mm", true).calls == 1);
}

TEST_CASE("OpRecorder's time for an op lies within the wall time around its call") {
  const Tensor a = randn({192, 192}), b = randn({192, 192});
  OpRecorder rec;
  const auto start = std::chrono::steady_clock::now();
  const Tensor c = mm(a, b);
  const double around = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(rec.events().size() == 1);
  CHECK(rec.events()[0].micros > 0);
  CHECK(rec.events()[0].micros <= around);
  (void)c;
}
