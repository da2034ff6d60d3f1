// Whether a CUDA graph capture is recording work, and the one check every host wait makes. While
// a capture records, kernels are queued into the graph and not run, so nothing may wait for the
// device: item(), to(kCPU), a host read inside an op, cuda::synchronize(), the allocator's flush
// all call refuse_host_sync(), which throws an hg::Error naming the op and saying why. Internal
// (not installed): users see hg::cuda::Graph and hg::cuda::is_capturing() (framework/cuda_graph.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "framework/device.h"

namespace hg::capture {

// How many random seeds one captured graph may draw (dropout and attention-dropout calls).
inline constexpr int64_t kMaxSeedSlots = 4096;

// The device a capture is recording on, if any (one capture at a time in the process).
std::optional<Device> active();
// True while a capture records work on `d` (no atomic read beyond one relaxed load otherwise).
bool active_on(Device d);

// The chokepoint. Throws "[op] cannot <what> during a CUDA graph capture on <device>: ..." when a
// capture records on `d`; returns otherwise.
void refuse_host_sync(const char* op, Device d, std::string_view what);
// The same for waits that are not tied to one device (a stream or device synchronisation).
void refuse_host_sync_any(const char* op, std::string_view what);

// Marks the start and the end of a capture on `d` (cuda::Graph calls them). With `seed_slots`,
// the capturing thread's random_u64() draws return slot numbers 0, 1, ... instead of values, and
// the CUDA random kernels read their seed from the graph's table at that slot (each replay writes
// the table with fresh draws from the global generator, in the same order eager draws them).
// begin throws when a capture is already recording; end returns the number of slots taken.
void begin(Device d, bool seed_slots);
int64_t end() noexcept;

// For random_u64(): the next slot when the calling thread is recording a capture with seed slots.
// Throws past kMaxSeedSlots.
std::optional<uint64_t> take_seed_slot();

// Tests: marks a capture as recording on `d` for the scope, with no device, graph or seed slots,
// so the refusals can be checked on any machine (FakeCapture on kCPU makes CPU reads refuse).
class FakeCapture {
 public:
  explicit FakeCapture(Device d) { begin(d, false); }
  ~FakeCapture() { end(); }
  FakeCapture(const FakeCapture&) = delete;
  FakeCapture& operator=(const FakeCapture&) = delete;
};

// What the CUDA backend installs to record, instantiate and replay one graph (kernels/cuda/graph.cu).
struct GraphBackend {
  virtual ~GraphBackend() = default;
  // Starts recording on the device's stream: a private memory pool, the seed table, the capture.
  virtual void begin(int device) = 0;
  // Ends the recording and instantiates the graph; throws (and cleans up) if CUDA invalidated it.
  virtual void end() = 0;
  // Ends a recording after an exception, dropping what was recorded. Never throws.
  virtual void abort() noexcept = 0;
  // Writes `n` seeds into the table (queued on the stream) and launches the graph.
  virtual void replay(const uint64_t* seeds, int64_t n) = 0;
};
using GraphFactory = std::unique_ptr<GraphBackend> (*)();
void set_graph_factory(GraphFactory factory);
GraphFactory graph_factory();  // nullptr without a CUDA backend

}  // namespace hg::capture
