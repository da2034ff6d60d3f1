// The capture flag and the host-sync chokepoint (framework/capture_state.h).
#include "framework/capture_state.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "framework/error.h"

namespace hg::capture {

namespace {
struct CaptureRecord {
  std::mutex mutex;
  bool recording = false;
  Device device{kCPU};
  bool seed_slots = false;
  std::thread::id thread;
  int64_t slots = 0;
};
// The fast path of every item(): one relaxed load while nothing is captured.
constinit std::atomic<bool> g_capture_any{false};
constinit GraphFactory g_graph_factory = nullptr;

CaptureRecord& capture_record() {
  static auto* s = new CaptureRecord();  // never destroyed: a graph may outlive statics
  return *s;
}

[[noreturn]] void throw_capture_refusal(const char* op, Device d, std::string_view what) {
  fail(op,
       "cannot {} during a CUDA graph capture on {}: the capture records kernels without running them, so the "
       "host would wait for work that has not happened (move it before or after the capture, or keep the value "
       "on the device)",
       what, d);
}
}  // namespace

std::optional<Device> active() {
  if (!g_capture_any.load(std::memory_order_relaxed)) return std::nullopt;
  CaptureRecord& s = capture_record();
  std::lock_guard lock(s.mutex);
  if (!s.recording) return std::nullopt;
  return s.device;
}

bool active_on(Device d) {
  const auto a = active();
  return a && *a == d;
}

void refuse_host_sync(const char* op, Device d, std::string_view what) {
  if (active_on(d)) throw_capture_refusal(op, d, what);
}

void refuse_host_sync_any(const char* op, std::string_view what) {
  if (const auto a = active()) throw_capture_refusal(op, *a, what);
}

void begin(Device d, bool seed_slots) {
  CaptureRecord& s = capture_record();
  std::lock_guard lock(s.mutex);
  HG_CHECK(!s.recording, "cuda::Graph", "a capture is already recording on {}; one capture at a time (end it first)",
           s.device);
  s.recording = true;
  s.device = d;
  s.seed_slots = seed_slots;
  s.thread = std::this_thread::get_id();
  s.slots = 0;
  g_capture_any.store(true, std::memory_order_relaxed);
}

int64_t end() noexcept {
  CaptureRecord& s = capture_record();
  std::lock_guard lock(s.mutex);
  s.recording = false;
  g_capture_any.store(false, std::memory_order_relaxed);
  return s.slots;
}

std::optional<uint64_t> take_seed_slot() {
  if (!g_capture_any.load(std::memory_order_relaxed)) return std::nullopt;
  CaptureRecord& s = capture_record();
  std::lock_guard lock(s.mutex);
  if (!s.recording || !s.seed_slots || s.thread != std::this_thread::get_id()) return std::nullopt;
  HG_CHECK(s.slots < kMaxSeedSlots, "cuda::Graph",
           "the captured work draws more than {} random seeds (dropout calls); capture a smaller step", kMaxSeedSlots);
  return static_cast<uint64_t>(s.slots++);
}

void set_graph_factory(GraphFactory factory) { g_graph_factory = factory; }
GraphFactory graph_factory() { return g_graph_factory; }

}  // namespace hg::capture
