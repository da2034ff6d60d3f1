// CUDA graphs: record a whole training step once and replay it with one launch (PyTorch's
// torch.cuda.graph). Run a few eager warm-up steps first (they create the cuBLASLt workspace, the
// GEMM plans, the optimizer state and the device hyperparameters), then capture one step and
// replay it; the step reads its batch from static input tensors the caller copies into before each
// replay, and its outputs (the loss) are static tensors rewritten by each replay. Everything the
// step allocates comes from the graph's own memory pool, freed when the graph is destroyed.
// A CPU-only build or a machine without a GPU throws "[cuda::Graph] ..." (docs/GUIDE.md).
#pragma once

#include <exception>
#include <memory>
#include <utility>

#include "framework/device.h"

namespace hg::cuda {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts recording the work the calling thread queues on `device`; nothing runs until replay().
  // Throws without a usable GPU, when this graph already holds a capture, or when another
  // capture is recording.
  void capture_begin(Device device = Device(kCUDA, 0));
  // Ends the recording and instantiates the graph (throws if CUDA found the capture invalid).
  void capture_end();
  // Records step() between capture_begin and capture_end; an exception from step() drops the
  // recording and propagates.
  template <class F>
  void capture(F&& step, Device device = Device(kCUDA, 0));
  // Runs the captured work once (asynchronously, on the device's stream). Random ops draw new
  // seeds from the global generator each replay, the seeds eager steps would draw.
  void replay();

  bool captured() const;
  // How many random seeds each replay draws (one per dropout / attention-dropout call).
  int64_t random_seeds() const;
  // Frees the graph and its memory pool (the destructor does the same); capture again afterwards.
  void reset();

 private:
  void abort_capture() noexcept;
  friend class GraphCapture;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RAII capture: `{ GraphCapture cap(graph); step(); }`. The destructor ends the capture, or drops
// it when the scope is left by an exception.
class GraphCapture {
 public:
  explicit GraphCapture(Graph& graph, Device device = Device(kCUDA, 0)) : graph_(graph) {
    graph_.capture_begin(device);
  }
  ~GraphCapture() noexcept(false) {
    if (std::uncaught_exceptions() > exceptions_)
      graph_.abort_capture();
    else
      graph_.capture_end();
  }
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

 private:
  Graph& graph_;
  int exceptions_ = std::uncaught_exceptions();
};

template <class F>
void Graph::capture(F&& step, Device device) {
  GraphCapture cap(*this, device);
  std::forward<F>(step)();
}

// Whether a capture is recording on any device (a step can skip its logging while captured).
bool is_capturing();

}  // namespace hg::cuda
