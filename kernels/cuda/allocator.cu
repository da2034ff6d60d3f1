// The caching CUDA allocator. A block is reused only by allocations on the stream it was last
// used on: kernels on one stream run in order, so the previous user's work has finished (on
// the device) before the next user's starts, with no host wait. Registered for kCUDA.
#include "kernels/cuda/allocator.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {

namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;

struct Block {
  size_t size;
  cudaStream_t stream;
};

// One device's pools. Cached blocks are keyed by (stream, size) so lower_bound finds the
// smallest block of the right stream that fits.
struct DevicePool {
  std::mutex mutex;
  std::map<std::pair<cudaStream_t, size_t>, std::vector<void*>> cached;
  std::unordered_map<void*, Block> active;
  MemoryStats stats;

  void* take_cached(cudaStream_t stream, size_t size) {
    auto it = cached.lower_bound({stream, size});
    if (it == cached.end() || it->first.first != stream) return nullptr;
    // Small requests reuse only their own class; large ones accept up to 1/4 of slack, so a
    // 100 MiB block is not wasted on a 10 MiB tensor.
    const size_t limit = size < kSmallLimit ? size : size + size / 4;
    if (it->first.second > limit) return nullptr;
    void* p = it->second.back();
    active.emplace(p, Block{it->first.second, stream});
    it->second.pop_back();
    if (it->second.empty()) cached.erase(it);
    return p;
  }

  // Frees every cached block of this device; the caller holds the mutex.
  void release_cached(int device) {
    if (cached.empty()) return;
    DeviceGuard guard(device);
    // cudaFree waits for the device anyway; make that wait explicit and counted.
    host_sync_device();
    for (auto& [key, ptrs] : cached) {
      for (void* p : ptrs) HG_CUDA_CHECK(cudaFree(p));
      stats.reserved -= static_cast<int64_t>(key.second * ptrs.size());
    }
    cached.clear();
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
  void* ptr = p.take_cached(stream, size);
  size_t got = ptr ? p.active.at(ptr).size : size;
  if (!ptr) {
    DeviceGuard guard(dev);
    cudaError_t e = cudaMalloc(&ptr, size);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      p.release_cached(dev);  // give the cache back to the driver and try once more
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
    p.active.emplace(ptr, Block{size, stream});
    p.stats.reserved += static_cast<int64_t>(size);
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
  const Block b = it->second;
  p.active.erase(it);
  p.stats.allocated -= static_cast<int64_t>(b.size);
  p.cached[{b.stream, b.size}].push_back(ptr);
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
    p.release_cached(d);
  }
}

CachingAllocator& caching_allocator() {
  // Never destroyed: tensors held by statics may be freed after this file's statics are gone,
  // and the CUDA context may already be torn down at exit.
  static auto* a = new CachingAllocator();
  return *a;
}

}  // namespace hg::cuda
