// GradScaler (docs/AMP.md section 5): dynamic loss scaling so small float16 gradients do not
// flush to zero. The scale, the growth counter and the found-inf flags are tensors on the
// device, and the optimizer reads found_inf itself to skip a step, so a GPU step never waits
// for the host.
//
//   amp::GradScaler scaler(hg::kCPU);
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);        // optional: to clip or inspect the true gradients
//   scaler.step(opt);            // skipped when any gradient held inf/NaN
//   scaler.update();             // back off after inf/NaN, grow after growth_interval clean steps
#pragma once

#include <map>
#include <optional>

#include "distributed/process_group.h"
#include "framework/tensor.h"
#include "optim/optimizer.h"

namespace hg::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;      // must be > 1
  double backoff_factor = 0.5;     // must be in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows; >= 1
  bool enabled = true;             // false: every method passes through
  // Data-parallel training: unscale_ all-reduces found_inf with MAX over this group, so every
  // rank skips and backs off together even when only one rank's gradients overflowed (needed
  // when gradients are not all-reduced before unscaling; harmless, one float, when they are).
  std::shared_ptr<distributed::ProcessGroup> process_group = nullptr;
};

class GradScaler {
 public:
  // `device` holds the scale (a cuda scaler without a CUDA device warns once and is disabled).
  explicit GradScaler(Device device = kCPU, GradScalerOptions options = {});
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // loss * scale (float32, so float16 losses do not overflow); the first call creates the scale.
  Tensor scale(const Tensor& loss);
  TensorList scale(const TensorList& losses);

  // Divides this optimizer's gradients by the scale in place, noting inf/NaN per device.
  // At most once per optimizer between update()s, and not after step(). float16 gradients are
  // refused: keep float32 master weights and let autocast make the float16 copies.
  void unscale_(optim::Optimizer& optimizer);
  // Unscales if unscale_ was not called, then runs optimizer.step(found_inf): the optimizer
  // skips the whole step when this optimizer's gradients held inf/NaN. Once per update().
  // On the CPU, without unscale_ first, SGD and Adam(W) over float32 parameters take the unscale
  // into their update's pass (Optimizer::step_unscaling), and gradients that the widening of
  // autocast's float16 copies found finite are not read again: the same results, bit for bit.
  void step(optim::Optimizer& optimizer);
  // Backs off (any optimizer found inf/NaN) or counts a clean step and grows; then every
  // optimizer is ready for the next iteration. update(s) sets the scale to s instead.
  void update();
  void update(double new_scale);
  void update(const Tensor& new_scale);

  // The current scale (1.0 when disabled; init_scale before the first scale()). Reads the
  // device tensor, so call it for logging, not in the step.
  double get_scale() const;
  bool is_enabled() const { return enabled_; }
  double get_growth_factor() const { return options_.growth_factor; }
  void set_growth_factor(double f);
  double get_backoff_factor() const { return options_.backoff_factor; }
  void set_backoff_factor(double f);
  int64_t get_growth_interval() const { return options_.growth_interval; }
  void set_growth_interval(int64_t n);
  int64_t get_growth_tracker() const;  // clean steps in a row so far

  // "scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker" (0-d
  // tensors); empty when disabled.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    std::map<int, Tensor> found_inf_per_device;  // by (device type, index) packed into an int
  };

  void check_scale_created(const char* what) const;
  OptimizerState& state_of(const optim::Optimizer& optimizer);
  Tensor scale_on(Device device);
  Tensor found_inf_of(const OptimizerState& state);  // one flag, on the scale's device
  bool step_unscaling(optim::Optimizer& optimizer, OptimizerState& state);

  Device device_;
  GradScalerOptions options_;
  bool enabled_;
  Tensor scale_;           // [1] float32, created by the first scale()
  Tensor growth_tracker_;  // [1] int32
  int64_t init_growth_tracker_ = 0;
  std::map<const optim::Optimizer*, OptimizerState> per_optimizer_;
};

}  // namespace hg::amp
