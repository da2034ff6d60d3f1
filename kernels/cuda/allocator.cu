// The caching CUDA allocator. A block is reused only by allocations on the stream it was last
// used on: kernels on one stream run in order, so the previous user's work has finished (on
// the device) before the next user's starts, with no host wait. That holds because halfgrad
// queues all work of a device on one stream (runtime.h); a second stream (a communication or
// prefetch stream) would need a record-stream step before its blocks are reused. Registered for
// kCUDA. Blocks belong to a pool: 0 for ordinary work, one per CUDA graph for what its capture
// allocated. The bookkeeping (splitting, merging, best fit) is BlockCache (block_cache.h).
#include "kernels/cuda/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "framework/capture_state.h"
#include "kernels/cuda/block_cache.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {

namespace {

struct DevicePool {
  std::mutex mutex;
  BlockCache cache;
  MemoryStats stats;
  uint64_t capturing = 0;        // the pool a capture on this device allocates from
  std::set<uint64_t> graph_ids;  // live graphs' pools

  // Gives the wholly free segments of `pool_id` back to the driver; the caller holds the mutex.
  void release_cached(int device, uint64_t pool_id) {
    const auto segments = cache.take_free_segments(pool_id);
    if (segments.empty()) return;
    DeviceGuard guard(device);
    // cudaFree waits for the device anyway; make that wait explicit and counted.
    host_sync_device();
    for (const auto& [addr, bytes] : segments) {
      HG_CUDA_CHECK(cudaFree(reinterpret_cast<void*>(addr)));
      stats.reserved -= static_cast<int64_t>(bytes);
    }
  }
};

constexpr int kMaxDevices = 64;

DevicePool& pool(int device) {
  static auto* pools = new std::array<DevicePool, kMaxDevices>();  // never destroyed (see below)
  HG_CHECK(device >= 0 && device < device_count_cached(), "allocate", "no CUDA device {} ({} devices visible)", device,
           device_count_cached());
  return (*pools)[static_cast<size_t>(device)];
}

// cudaMalloc for a capture's pool: the capturing thread's mode counts cudaMalloc as potentially
// unsafe (the allocation is not recorded in the graph), which is exactly how the pool uses it: the
// block lives as long as the graph. So the call runs in relaxed mode, as PyTorch's allocator does.
cudaError_t device_malloc(void** ptr, size_t size, bool capturing) {
  if (!capturing) return cudaMalloc(ptr, size);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  HG_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t e = cudaMalloc(ptr, size);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}

[[maybe_unused]] const bool g_registered = [] {
  set_allocator(kCUDA, &caching_allocator());
  return true;
}();

}  // namespace

size_t CachingAllocator::size_class(size_t n) { return BlockCache::round(n); }

void* CachingAllocator::allocate(size_t nbytes, Device device) {
  const size_t size = size_class(nbytes);
  const int dev = device.index;
  DevicePool& p = pool(dev);
  cudaStream_t stream = current_stream(dev);
  std::lock_guard lock(p.mutex);
  const uint64_t pool_id = p.capturing;
  uintptr_t addr = p.cache.take(pool_id, stream, size);
  if (addr == 0) {
    DeviceGuard guard(dev);
    void* ptr = nullptr;
    cudaError_t e = device_malloc(&ptr, size, pool_id != 0);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      capture::refuse_host_sync(
          "allocate", device,
          fmt::format("flush the memory cache after cudaMalloc of {} bytes ran out of memory (cudaFree waits for the "
                      "device; free memory before capturing, or capture a smaller step)",
                      size));
      p.release_cached(dev, 0);  // give the cache back to the driver and try once more
      e = cudaMalloc(&ptr, size);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      fail("allocate",
           "CUDA out of memory asking for {} bytes ({:.2f} MiB) on cuda:{}; halfgrad holds {} bytes ({} in "
           "use by tensors), the device has {} bytes free of {}",
           size, static_cast<double>(size) / (1 << 20), dev, p.stats.reserved, p.stats.allocated, free_bytes,
           total_bytes);
    }
    HG_CUDA_CHECK(e);
    addr = reinterpret_cast<uintptr_t>(ptr);
    p.cache.add_segment(addr, size, pool_id, stream);
    p.stats.reserved += static_cast<int64_t>(size);
    ++p.stats.system_allocations;
  }
  p.stats.allocated += static_cast<int64_t>(p.cache.block_size(addr));
  p.stats.peak_allocated = std::max(p.stats.peak_allocated, p.stats.allocated);
  return reinterpret_cast<void*>(addr);
}

void CachingAllocator::deallocate(void* ptr, size_t, Device device) {
  if (!ptr) return;
  DevicePool& p = pool(device.index);
  std::lock_guard lock(p.mutex);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  // Freed while a capture records: the recorded kernels may use the block at every replay, so it
  // joins the graph's pool and is never handed to other work while the graph lives.
  const uint64_t pool_id = p.capturing != 0 ? p.capturing : p.cache.block_pool(addr);
  const size_t size = p.cache.release(addr, pool_id);  // 0: not ours, nothing to do in a destructor path
  p.stats.allocated -= static_cast<int64_t>(size);
}

uint64_t CachingAllocator::begin_capture_pool(int device) {
  static std::atomic<uint64_t> next{1};
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  HG_CHECK(p.capturing == 0, "cuda::Graph", "cuda:{} is already capturing into a memory pool", device);
  p.capturing = next.fetch_add(1);
  p.graph_ids.insert(p.capturing);
  return p.capturing;
}

void CachingAllocator::end_capture_pool(int device) {
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  p.capturing = 0;
}

void CachingAllocator::release_pool(int device, uint64_t pool_id) noexcept {
  try {
    DevicePool& p = pool(device);
    std::lock_guard lock(p.mutex);
    if (p.capturing == pool_id) p.capturing = 0;
    p.graph_ids.erase(pool_id);
    // Its wholly free segments go back to the driver, unless another capture records (no cudaFree
    // then). What is left (blocks still held by tensors, and their free neighbours) joins the pool
    // that is allocating now: the ordinary one, or the capture's.
    if (p.capturing == 0) p.release_cached(device, pool_id);
    p.cache.retag(pool_id, p.capturing);
  } catch (...) {
    (void)cudaGetLastError();  // called from destructors: a failed free leaves the blocks to the driver
  }
}

int64_t CachingAllocator::pool_reserved(int device, uint64_t pool_id) {
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  return p.cache.pool_bytes(pool_id);
}

int64_t CachingAllocator::graph_pools_reserved(int device) {
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  int64_t bytes = 0;
  for (const uint64_t id : p.graph_ids) bytes += p.cache.pool_bytes(id);
  return bytes;
}

MemoryStats CachingAllocator::stats(int device) {
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  return p.stats;
}

void CachingAllocator::empty_cache() {
  for (int d = 0; d < device_count_cached(); ++d) {
    DevicePool& p = pool(d);
    std::lock_guard lock(p.mutex);
    p.release_cached(d, 0);  // graphs' pools stay: their graphs replay into them
  }
}

CachingAllocator& caching_allocator() {
  // Never destroyed: tensors held by statics may be freed after this file's statics are gone,
  // and the CUDA context may already be torn down at exit.
  static auto* a = new CachingAllocator();
  return *a;
}

}  // namespace hg::cuda
