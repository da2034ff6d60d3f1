// Devices, streams and host-synchronisation accounting; installs the CudaHooks that
// framework/cuda.h forwards to.
#include "kernels/cuda/runtime.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "framework/capture_state.h"
#include "framework/cuda.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/check.h"

namespace hg::cuda {

namespace {

std::atomic<int64_t> g_host_syncs{0};

struct DeviceState {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  cudaDeviceProp props{};
};

constexpr int kMaxDevices = 64;
std::array<DeviceState, kMaxDevices>& device_states() {
  static auto* s = new std::array<DeviceState, kMaxDevices>();  // never destroyed: streams outlive statics
  return *s;
}

DeviceState& state(int device) {
  HG_CHECK(device >= 0 && device < device_count_cached(), "cuda", "device index {} out of range ({} devices)", device,
           device_count_cached());
  DeviceState& s = device_states()[static_cast<size_t>(device)];
  std::call_once(s.once, [&] {
    DeviceGuard guard(device);
    HG_CUDA_CHECK(cudaGetDeviceProperties(&s.props, device));
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  });
  return s;
}

// Page-locked host blocks (DataLoader pin_memory, cuda::pin_memory), cached by exact size since a
// loader's batches repeat their sizes. A host-to-device copy from pinned memory returns before it
// has read the block, so a freed block is reused only once an event recorded on every device's
// stream when it was freed has completed (PyTorch's caching host allocator does the same).
class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& blocks = free_[nbytes];
      for (auto it = blocks.begin(); it != blocks.end(); ++it) {
        if (!finished(*it)) continue;
        void* p = it->ptr;
        for (cudaEvent_t e : it->events) (void)cudaEventDestroy(e);
        blocks.erase(it);
        return p;
      }
    }
    void* p = nullptr;
    HG_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable));
    return p;
  }

  // Called from Storage's destructor: must not throw. Without its events the block is not cached
  // but freed (cudaFreeHost waits for the device).
  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (ptr == nullptr) return;
    Block block{ptr, {}};
    try {
      for (int d = 0; d < device_count_cached(); ++d) {
        DeviceGuard guard(d);
        cudaEvent_t e = nullptr;
        HG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        block.events.push_back(e);
        HG_CUDA_CHECK(cudaEventRecord(e, current_stream(d)));
      }
    } catch (...) {
      (void)cudaGetLastError();
      for (cudaEvent_t e : block.events) (void)cudaEventDestroy(e);
      (void)cudaFreeHost(ptr);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    free_[nbytes].push_back(std::move(block));
  }

 private:
  struct Block {
    void* ptr;
    std::vector<cudaEvent_t> events;
  };
  static bool finished(const Block& b) {
    for (cudaEvent_t e : b.events) {
      const cudaError_t r = cudaEventQuery(e);
      if (r == cudaErrorNotReady) return false;
      if (r != cudaSuccess) {
        (void)cudaGetLastError();
        return false;  // never reuse a block whose copies cannot be shown finished
      }
    }
    return true;
  }
  std::mutex mutex_;
  std::map<size_t, std::vector<Block>> free_;
};

class Hooks final : public CudaHooks {
 public:
  int device_count() const override { return device_count_cached(); }
  void synchronize() const override {
    for (int d = 0; d < device_count_cached(); ++d) host_sync(current_stream(d));
  }
  MemoryStats memory_stats(int device) const override { return caching_allocator().stats(device); }
  void empty_cache() const override { caching_allocator().empty_cache(); }
  int64_t host_sync_count() const override { return g_host_syncs.load(std::memory_order_relaxed); }
  Allocator* pinned_allocator() const override {
    static auto* a = new PinnedAllocator();  // never destroyed: pinned tensors may be freed at exit
    return a;
  }
};

[[maybe_unused]] const bool g_hooks_installed = [] {
  static Hooks hooks;
  set_cuda_hooks(&hooks);
  return true;
}();

}  // namespace

int device_count_cached() {
  static const int count = [] {
    int n = 0;
    // No driver or no device is not an error here: is_available() just says false.
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError();
      return 0;
    }
    // A visible device is not yet a usable one (driver too old for this runtime, device busy in
    // exclusive mode, no kernel image for its architecture): make its context now and run a
    // trivial call, so is_available() means "ops will run" and amp does not switch on for a
    // device whose first kernel would fail.
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(0) != cudaSuccess ||
        cudaFree(nullptr) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    (void)cudaSetDevice(previous);
    return std::min(n, kMaxDevices);
  }();
  return count;
}

int current_device() {
  int d = 0;
  HG_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cudaStream_t current_stream(int device) { return state(device).stream; }
const cudaDeviceProp& device_properties(int device) { return state(device).props; }

DeviceGuard::DeviceGuard(int device) : current_(device) {
  HG_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) HG_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != current_) (void)cudaSetDevice(previous_);  // destructors do not throw
}

namespace {
std::mutex g_error_mutex;
std::vector<const char*>& error_ops() {
  static auto* ops = new std::vector<const char*>{"cuda"};  // 0: unnamed
  return *ops;
}
DeviceErrorRecord* g_error_record = nullptr;  // pinned, mapped; allocated by the first kernel that may report
}  // namespace

DeviceErrorRecord* device_error_record() {
  static DeviceErrorRecord* rec = [] {
    void* p = nullptr;
    // Portable + mapped: one host allocation every device can write through unified addressing.
    HG_CUDA_CHECK(cudaHostAlloc(&p, sizeof(DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, sizeof(DeviceErrorRecord));
    auto* r = static_cast<DeviceErrorRecord*>(p);
    std::lock_guard<std::mutex> lock(g_error_mutex);
    g_error_record = r;
    return r;
  }();
  return rec;
}

int device_error_op(const char* op) {
  std::lock_guard<std::mutex> lock(g_error_mutex);
  auto& ops = error_ops();
  for (size_t i = 0; i < ops.size(); ++i)
    if (std::strcmp(ops[i], op) == 0) return static_cast<int>(i);
  ops.push_back(op);
  return static_cast<int>(ops.size() - 1);
}

void check_device_errors() {
  DeviceErrorRecord* rec = nullptr;
  const char* op = "cuda";
  DeviceErrorRecord seen{};
  {
    std::lock_guard<std::mutex> lock(g_error_mutex);
    rec = g_error_record;
    if (rec == nullptr) return;
    // After a stream/device synchronisation the kernels' writes to mapped memory are visible.
    auto* v = reinterpret_cast<volatile DeviceErrorRecord*>(rec);
    if (v->kind <= 0) return;
    seen.kind = v->kind, seen.op = v->op, seen.position = v->position, seen.value = v->value, seen.limit = v->limit;
    v->kind = 0;  // cleared so the next error is reported too
    if (seen.op >= 0 && static_cast<size_t>(seen.op) < error_ops().size())
      op = error_ops()[static_cast<size_t>(seen.op)];
  }
  switch (static_cast<DeviceErrorKind>(seen.kind)) {
    case DeviceErrorKind::TargetOutOfRange:
      fail(op,
           "target {} (at position {}) is out of range for {} classes: expected 0 <= target < {} or ignore_index "
           "(found on the device by an earlier launch, raised at this synchronisation)",
           seen.value, seen.position, seen.limit, seen.limit);
    case DeviceErrorKind::IndexOutOfRange:
      fail(op,
           "index {} (at position {}) is out of range for a dimension of size {} (found on the device by an earlier "
           "launch, raised at this synchronisation; the op skipped it)",
           seen.value, seen.position, seen.limit);
    default: fail(op, "unknown device-side error {}", seen.kind);
  }
}

// The ops that wait (item, to, the host checks in ops) refuse by name before they get here; this
// catches any other path, before CUDA would invalidate the capture.
void host_sync(cudaStream_t stream) {
  capture::refuse_host_sync_any("cuda", "synchronize a stream");
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  check_device_errors();
}

void host_sync_device() {
  capture::refuse_host_sync_any("cuda", "synchronize the device");
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
  HG_CUDA_CHECK(cudaDeviceSynchronize());
  check_device_errors();
}

void copy_to_host(void* dst, const void* src, size_t nbytes, cudaStream_t stream) {
  HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
  host_sync(stream);
}

unsigned grid_for(int64_t n, int threads, int per_thread, int device) {
  const int64_t per_block = static_cast<int64_t>(threads) * per_thread;
  const int64_t needed = std::max<int64_t>(1, (n + per_block - 1) / per_block);
  const int64_t cap = static_cast<int64_t>(device_properties(device).multiProcessorCount) * 32;
  return static_cast<unsigned>(std::min(needed, cap));
}

}  // namespace hg::cuda
