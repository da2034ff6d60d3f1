#include "framework/inference_mode.h"

namespace hg {

namespace {
thread_local bool t_inference_mode = false;
}

bool is_inference_mode_enabled() { return t_inference_mode; }

// inference_mode(false) inside an inference scope turns it off again; grad mode follows, as in
// PyTorch, where leaving inference mode restores the grad mode that was in force.
InferenceModeGuard::InferenceModeGuard(bool enabled)
    : prev_inference_(t_inference_mode), prev_grad_(GradMode::is_enabled()) {
  t_inference_mode = enabled;
  if (enabled) GradMode::set_enabled(false);
}

InferenceModeGuard::~InferenceModeGuard() {
  t_inference_mode = prev_inference_;
  GradMode::set_enabled(prev_grad_);
}

}  // namespace hg
