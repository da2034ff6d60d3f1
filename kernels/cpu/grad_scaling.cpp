// CPU kernels for GradScaler: the fused inf/NaN check + unscale, and the scale update.
#include <atomic>
#include <cmath>
#include <limits>

#include "framework/ops/grad_scaling_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

template <class T>
bool unscale_typed(T* data, int64_t n, double inv_scale) {
  std::atomic<bool> found{false};
  using A = acc_t<T>;
  parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    // Written so it vectorises: finiteness as one comparison (false for inf and NaN), the flag
    // as an integer OR, the product in double as before.
    int bad = 0;
    for (int64_t i = begin; i < end; ++i) {
      const A v = static_cast<A>(data[i]);
      bad |= !(std::abs(v) <= std::numeric_limits<A>::max());
      data[i] = static_cast<T>(static_cast<A>(static_cast<double>(v) * inv_scale));
    }
    if (bad) found.store(true, std::memory_order_relaxed);
  });
  return found.load();
}

void unscale_grad_cpu(const TensorList& grads, const Tensor& found_inf, const Tensor& scale) {
  const double inv_scale = 1.0 / static_cast<double>(*scale.data_ptr<float>());
  for (const Tensor& grad : grads) {
    const bool found = dispatch_floating(grad.dtype(), "amp_unscale_", [&]<class T>(TypeTag<T>) {
      return unscale_typed(static_cast<T*>(grad.raw_data()), grad.numel(), inv_scale);
    });
    if (found) *found_inf.data_ptr<float>() = 1.0f;
  }
}

void update_scale_cpu(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf, double growth_factor,
                      double backoff_factor, int64_t growth_interval) {
  float& s = *scale.data_ptr<float>();
  int32_t& tracker = *growth_tracker.data_ptr<int32_t>();
  if (*found_inf.data_ptr<float>() != 0.0f) {
    s = static_cast<float>(s * backoff_factor);
    tracker = 0;
    return;
  }
  const int64_t clean = static_cast<int64_t>(tracker) + 1;
  if (clean >= growth_interval) {
    const auto grown = static_cast<float>(s * growth_factor);
    if (std::isfinite(grown)) s = grown;  // growth is capped: the scale never becomes inf
    tracker = 0;
  } else {
    tracker = static_cast<int32_t>(clean);
  }
}

}  // namespace

HG_REGISTER_KERNEL(unscale_grad_stub, kCPU, unscale_grad_cpu);
HG_REGISTER_KERNEL(update_scale_stub, kCPU, update_scale_cpu);

}  // namespace hg::cpu
