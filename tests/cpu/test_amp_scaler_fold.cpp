// GradScaler::step's fast path on the CPU: kernels that widen 16-bit gradients note whether every
// value is finite (internal::note_all_finite).
#include <cmath>
#include <cstring>
#include <limits>

#include "framework/ops/internal.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

namespace {
bool all_finite_values(const Tensor& t) {
  for (float v : t.to(kFloat32).to_vector<float>())
    if (!std::isfinite(v)) return false;
  return true;
}

// t (float16 or bfloat16) widened value by value through hg::Half / hg::BFloat16.
Tensor widened_by_element(const Tensor& t) {
  std::vector<float> out;
  if (t.dtype() == kFloat16) {
    for (Half h : t.to_vector<Half>()) out.push_back(static_cast<float>(h));
  } else {
    for (BFloat16 h : t.to_vector<BFloat16>()) out.push_back(static_cast<float>(h));
  }
  return tensor(out);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("amp: widening a 16-bit tensor to float32 notes whether it is all finite, until it is written") {
  for (Dtype d : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    // 37 values: two 16-lane blocks and a tail; the bad value in a block, then in the tail.
    const Tensor clean = randn({37}).to(d);
    Tensor wide = clean.to(kFloat32);
    CHECK(internal::known_all_finite(wide));
    CHECK(same_bits(wide, widened_by_element(clean)));
    for (const int64_t at : {5, 36}) {
      for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        CAPTURE(at);
        Tensor dirty = clean.clone();
        dirty.index_put_({at}, static_cast<double>(bad));
        const Tensor w = dirty.to(kFloat32);
        CHECK_FALSE(internal::known_all_finite(w));
        CHECK(same_bits(w, widened_by_element(dirty)));
      }
    }
    // A view is not the whole storage; an in-place write makes the note stale.
    CHECK_FALSE(internal::known_all_finite(wide.slice(0, 0, 10)));
    wide.mul_(2.0);
    CHECK_FALSE(internal::known_all_finite(wide));
  }
  // Narrowing claims nothing, and neither does an untouched float32 tensor.
  CHECK_FALSE(internal::known_all_finite(randn({8}).to(kFloat16)));
  CHECK_FALSE(internal::known_all_finite(randn({8})));
}

TEST_CASE("amp: linear's widened weight gradient is noted all finite exactly when it is, on each kernel path") {
  // Batch 8 takes the short-inner kernel, 40 and 128 the packed or narrow ones (and oneDNN's
  // product then its widening for bfloat16 on CPUs with bfloat16 units). A large upstream
  // gradient overflows the 16-bit product: then the gradient holds inf and must not be noted.
  manual_seed(7);
  for (Dtype d : {kFloat16, kBFloat16}) {
    for (const int64_t batch : {8, 40, 128}) {
      for (const double upstream_scale : {1.0, d == kFloat16 ? 1e5 : 1e38}) {
        CAPTURE(dtype_name(d));
        CAPTURE(batch);
        CAPTURE(upstream_scale);
        Tensor w = (randn({70, 90}) * 0.1).detach().requires_grad_();
        const Tensor x = randn({batch, 90}) * 10.0, upstream = randn({batch, 70}) * upstream_scale;
        Tensor loss;
        {
          amp::AutocastGuard g(kCPU, d);
          loss = (linear(x, w).to(kFloat32) * upstream).sum();
        }
        loss.backward();
        const bool finite = all_finite_values(w.grad());
        CHECK(finite == (upstream_scale == 1.0));
        CHECK(internal::known_all_finite(w.grad()) == finite);
      }
    }
  }
}
