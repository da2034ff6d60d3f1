// hg::cuda::Graph: the device-independent half (checks, the seed draws of each replay); the
// recording itself is the CUDA backend's (kernels/cuda/graph.cu, through capture::GraphBackend).
#include "framework/cuda_graph.h"

#include <vector>

#include "framework/capture_state.h"
#include "framework/cuda.h"
#include "framework/error.h"
#include "framework/ops/creation.h"

namespace hg::cuda {

struct Graph::Impl {
  std::unique_ptr<capture::GraphBackend> backend;
  bool recording = false;
  bool captured = false;
  int64_t seeds = 0;
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() {
  if (impl_ && impl_->recording) abort_capture();
}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

void Graph::capture_begin(Device device) {
  HG_CHECK(impl_, "cuda::Graph", "used after being moved from");
  HG_CHECK(device.is_cuda(), "cuda::Graph", "captures CUDA work; got device {}", device);
  HG_CHECK(is_built(), "cuda::Graph", "{}", backend_error());
  HG_CHECK(device.index >= 0 && device.index < device_count(), "cuda::Graph",
           "no CUDA device {} to capture on ({} visible)", device, device_count());
  HG_CHECK(!impl_->recording && !impl_->captured, "cuda::Graph",
           "this graph already holds a capture; reset() it before capturing again");
  capture::GraphFactory factory = capture::graph_factory();
  HG_CHECK(factory != nullptr, "cuda::Graph", "the CUDA backend installed no graph support");
  capture::begin(device, /*seed_slots=*/true);
  try {
    impl_->backend = factory();
    impl_->backend->begin(device.index);
  } catch (...) {
    impl_->backend.reset();
    capture::end();
    throw;
  }
  impl_->recording = true;
}

void Graph::capture_end() {
  HG_CHECK(impl_ && impl_->recording, "cuda::Graph", "capture_end without capture_begin");
  impl_->recording = false;
  impl_->seeds = capture::end();
  try {
    impl_->backend->end();
  } catch (...) {
    impl_->backend.reset();
    throw;
  }
  impl_->captured = true;
}

void Graph::abort_capture() noexcept {
  if (!impl_ || !impl_->recording) return;
  impl_->recording = false;
  capture::end();
  impl_->backend->abort();
  impl_->backend.reset();
}

void Graph::replay() {
  HG_CHECK(impl_ && impl_->captured, "cuda::Graph", "replay() needs a captured graph (capture a step first)");
  HG_CHECK(!capture::active(), "cuda::Graph", "cannot replay a graph while a capture is recording");
  std::vector<uint64_t> seeds(static_cast<size_t>(impl_->seeds));
  for (uint64_t& s : seeds) s = random_u64();
  impl_->backend->replay(seeds.data(), impl_->seeds);
}

bool Graph::captured() const { return impl_ && impl_->captured; }
int64_t Graph::random_seeds() const { return impl_ ? impl_->seeds : 0; }

void Graph::reset() {
  HG_CHECK(impl_ && !impl_->recording, "cuda::Graph", "reset() while recording; end the capture first");
  impl_->backend.reset();
  impl_->captured = false;
  impl_->seeds = 0;
}

bool is_capturing() { return capture::active().has_value(); }

}  // namespace hg::cuda
