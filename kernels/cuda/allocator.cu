// The caching CUDA allocator. A block is reused only by allocations on the stream it was last
// used on: kernels on one stream run in order, so the previous user's work has finished (on
// the device) before the next user's starts, with no host wait. Registered for kCUDA. Blocks
// belong to a pool: 0 for ordinary work, one per CUDA graph for what its capture allocated.
#include "kernels/cuda/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framework/capture_state.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;

struct Block {
  size_t size;
  cudaStream_t stream;
  uint64_t pool;
};

struct CacheKey {
  uint64_t pool;
  cudaStream_t stream;
  size_t size;
  auto operator<=>(const CacheKey&) const = default;
};

// One device's pools. Cached blocks are keyed by (pool, stream, size) so lower_bound finds the
// smallest block of the right pool and stream that fits.
struct DevicePool {
  std::mutex mutex;
  std::map<CacheKey, std::vector<void*>> cached;
  std::unordered_map<void*, Block> active;
  MemoryStats stats;
  uint64_t capturing = 0;                      // the pool a capture on this device allocates from
  std::map<uint64_t, int64_t> graph_reserved;  // live graph pools and the bytes each holds

  void* take_cached(uint64_t pool_id, cudaStream_t stream, size_t size) {
    auto it = cached.lower_bound({pool_id, stream, size});
    if (it == cached.end() || it->first.pool != pool_id || it->first.stream != stream) return nullptr;
    // Small requests reuse only their own class; large ones accept up to 1/4 of slack, so a
    // 100 MiB block is not wasted on a 10 MiB tensor.
    const size_t limit = size < kSmallLimit ? size : size + size / 4;
    if (it->first.size > limit) return nullptr;
    void* p = it->second.back();
    active.emplace(p, Block{it->first.size, stream, pool_id});
    it->second.pop_back();
    if (it->second.empty()) cached.erase(it);
    return p;
  }

  // Frees every cached block of `pool_id` on this device; the caller holds the mutex.
  void release_cached(int device, uint64_t pool_id) {
    bool any = false;
    for (const auto& entry : cached) any = any || entry.first.pool == pool_id;
    if (!any) return;
    DeviceGuard guard(device);
    // cudaFree waits for the device anyway; make that wait explicit and counted.
    host_sync_device();
    for (auto it = cached.begin(); it != cached.end();) {
      if (it->first.pool != pool_id) {
        ++it;
        continue;
      }
      const auto bytes = static_cast<int64_t>(it->first.size * it->second.size());
      for (void* p : it->second) HG_CUDA_CHECK(cudaFree(p));
      stats.reserved -= bytes;
      if (pool_id != 0) graph_reserved[pool_id] -= bytes;
      it = cached.erase(it);
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

[[maybe_unused]] const bool g_registered = [] {
  set_allocator(kCUDA, &caching_allocator());
  return true;
}();

}  // namespace

size_t CachingAllocator::size_class(size_t n) {
  if (n <= 512) return 512;
  if (n < kSmallLimit) return (n + 511) & ~size_t{511};
  // Large: round to 1/8 of the power of two (at least 2 MiB granularity above 16 MiB).
  const size_t p = size_t{1} << (63 - __builtin_clzll(n));
  const size_t step = std::max<size_t>(p / 8, 512);
  return (n + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t nbytes, Device device) {
  const size_t size = size_class(nbytes);
  const int dev = device.index;
  DevicePool& p = pool(dev);
  cudaStream_t stream = current_stream(dev);
  std::lock_guard lock(p.mutex);
  const uint64_t pool_id = p.capturing;
  void* ptr = p.take_cached(pool_id, stream, size);
  size_t got = ptr ? p.active.at(ptr).size : size;
  if (!ptr) {
    DeviceGuard guard(dev);
    cudaError_t e = cudaMalloc(&ptr, size);
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
    p.active.emplace(ptr, Block{size, stream, pool_id});
    p.stats.reserved += static_cast<int64_t>(size);
    if (pool_id != 0) p.graph_reserved[pool_id] += static_cast<int64_t>(size);
    ++p.stats.system_allocations;
    got = size;
  }
  p.stats.allocated += static_cast<int64_t>(got);
  p.stats.peak_allocated = std::max(p.stats.peak_allocated, p.stats.allocated);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t, Device device) {
  if (!ptr) return;
  DevicePool& p = pool(device.index);
  std::lock_guard lock(p.mutex);
  auto it = p.active.find(ptr);
  if (it == p.active.end()) return;  // not ours: nothing sensible to do in a destructor path
  Block b = it->second;
  p.active.erase(it);
  p.stats.allocated -= static_cast<int64_t>(b.size);
  if (p.capturing != 0 && b.pool != p.capturing) {
    // Freed while a capture records: the recorded kernels may use the block at every replay, so it
    // joins the graph's pool and is never handed to other work while the graph lives.
    if (b.pool != 0) p.graph_reserved[b.pool] -= static_cast<int64_t>(b.size);
    p.graph_reserved[p.capturing] += static_cast<int64_t>(b.size);
    b.pool = p.capturing;
  }
  p.cached[{b.pool, b.stream, b.size}].push_back(ptr);
}

uint64_t CachingAllocator::begin_capture_pool(int device) {
  static std::atomic<uint64_t> next{1};
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  HG_CHECK(p.capturing == 0, "cuda::Graph", "cuda:{} is already capturing into a memory pool", device);
  p.capturing = next.fetch_add(1);
  p.graph_reserved[p.capturing] = 0;
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
    if (p.capturing != 0) {
      // Another capture records (no cudaFree now): the blocks join its pool instead.
      for (auto it = p.cached.begin(); it != p.cached.end();) {
        if (it->first.pool != pool_id) {
          ++it;
          continue;
        }
        auto& dst = p.cached[{p.capturing, it->first.stream, it->first.size}];
        dst.insert(dst.end(), it->second.begin(), it->second.end());
        p.graph_reserved[p.capturing] += static_cast<int64_t>(it->first.size * it->second.size());
        it = p.cached.erase(it);
      }
    } else {
      p.release_cached(device, pool_id);
    }
    // Blocks still held by tensors (a static output kept after the graph) join the pool that is
    // allocating now: the ordinary one, or the capture's.
    for (auto& entry : p.active) {
      if (entry.second.pool != pool_id) continue;
      entry.second.pool = p.capturing;
      if (p.capturing != 0) p.graph_reserved[p.capturing] += static_cast<int64_t>(entry.second.size);
    }
    p.graph_reserved.erase(pool_id);
  } catch (...) {
    (void)cudaGetLastError();  // called from destructors: a failed free leaves the blocks to the driver
  }
}

int64_t CachingAllocator::pool_reserved(int device, uint64_t pool_id) {
  DevicePool& p = pool(device);
  std::lock_guard lock(p.mutex);
  if (pool_id == 0) {
    int64_t graphs = 0;
    for (const auto& entry : p.graph_reserved) graphs += entry.second;
    return p.stats.reserved - graphs;
  }
  const auto it = p.graph_reserved.find(pool_id);
  return it == p.graph_reserved.end() ? 0 : it->second;
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
