// --cuda-graph: the examples' training step captured once in a CUDA graph and replayed per batch
// (docs/GUIDE.md, "CUDA graphs"). Header-only, as common.h.
#pragma once

#include <halfgrad.h>

#include <functional>

#include "framework/cuda_graph.h"

namespace examples {

// Runs step(x, y) -> loss eagerly for the first `warmup` calls, then captures it once on static
// copies of x and y and replays it for every batch of the same shapes. A batch of other shapes (an
// epoch's last, partial one) runs eagerly: the eager step and the graph share the parameters, the
// optimizer state and the scaler, so training goes on as if every step had run one way.
class GraphedStep {
 public:
  using Step = std::function<hg::Tensor(const hg::Tensor&, const hg::Tensor&)>;

  GraphedStep(Step step, bool enabled, int warmup = 3) : step_(std::move(step)), enabled_(enabled), warmup_(warmup) {}

  // One training step on (x, y) (on any device: they are copied into the static inputs); returns
  // the loss, which the next call may overwrite.
  hg::Tensor operator()(const hg::Tensor& x, const hg::Tensor& y) {
    if (!enabled_ || calls_++ < warmup_) return step_(x, y);
    if (!graph_.captured()) {
      x_ = hg::empty(x.shape(), hg::TensorOptions(x.dtype()).device(device()));
      y_ = hg::empty(y.shape(), hg::TensorOptions(y.dtype()).device(device()));
      x_.copy_(x);
      y_.copy_(y);
      graph_.capture([&] { loss_ = step_(x_, y_); }, device());
    } else if (x.shape() != x_.shape() || y.shape() != y_.shape()) {
      return step_(x, y);
    } else {
      x_.copy_(x);
      y_.copy_(y);
    }
    graph_.replay();
    return loss_;
  }

  bool captured() const { return graph_.captured(); }

 private:
  static hg::Device device() { return hg::Device(hg::kCUDA, 0); }

  Step step_;
  bool enabled_;
  int warmup_;
  int calls_ = 0;
  hg::cuda::Graph graph_;
  hg::Tensor x_, y_, loss_;
};

}  // namespace examples
