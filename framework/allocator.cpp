#include "framework/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "framework/cuda.h"
#include "framework/cuda_backend.h"
#include "framework/error.h"

namespace hg {

namespace {

constexpr size_t kAlignment = 64;

// Blocks of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages
// (madvise: the kernel's default mode leaves them off otherwise). A weight read column slice by
// column slice touches a new 4 KiB page on every row, and a pass over a 64 MiB tensor takes
// 16384 page faults; on 2 MiB pages both are 512 times fewer. HG_CPU_HUGE_PAGES=0 turns it off.
constexpr size_t kHugePage = size_t{2} << 20;

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* env = std::getenv("HG_CPU_HUGE_PAGES");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return wanted;
}

void* system_allocate(size_t size) {
  if (size < kHugePage || !huge_pages_wanted()) return std::aligned_alloc(kAlignment, size);
  void* ptr = nullptr;
  if (posix_memalign(&ptr, kHugePage, size) != 0) return nullptr;
  madvise(ptr, size / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: failure changes nothing
  return ptr;
}

// Rounds a request up to a size class: multiples of 512 bytes below 1 MiB, then steps of 1/8
// of the power of two, so a block can be reused by requests of nearly the same size.
size_t size_class(size_t n) {
  if (n <= 512) return 512;
  if (n < (1u << 20)) return (n + 511) & ~size_t{511};
  size_t p = size_t{1} << (63 - __builtin_clzll(n));
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

class CachingCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device) override {
    const size_t size = size_class(nbytes);
    std::lock_guard lock(mutex_);
    void* ptr = nullptr;
    auto& bucket = free_[size];
    if (!bucket.empty()) {
      ptr = bucket.back();
      bucket.pop_back();
    } else {
      ptr = system_allocate(size);
      if (!ptr) {
        release_cached_locked();
        ptr = system_allocate(size);
      }
      HG_CHECK(ptr != nullptr, "allocate", "out of memory asking for {} bytes on the cpu ({} bytes held)", size,
               stats_.reserved);
      stats_.reserved += static_cast<int64_t>(size);
      ++stats_.system_allocations;
    }
    stats_.allocated += static_cast<int64_t>(size);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes, Device) override {
    if (!ptr) return;
    const size_t size = size_class(nbytes);
    std::lock_guard lock(mutex_);
    stats_.allocated -= static_cast<int64_t>(size);
    free_[size].push_back(ptr);
  }

  MemoryStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard lock(mutex_);
    release_cached_locked();
  }

 private:
  void release_cached_locked() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) std::free(p);
      stats_.reserved -= static_cast<int64_t>(size * blocks.size());
      blocks.clear();
    }
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  MemoryStats stats_;
};

CachingCpuAllocator& cpu_allocator() {
  static auto* a = new CachingCpuAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

// constinit: the CUDA backend calls set_allocator from a static initialiser in another file,
// which may run before this file's dynamic initialisers.
constinit Allocator* g_allocators[kNumDeviceTypes] = {};

}  // namespace

Allocator* get_allocator(DeviceType type) {
  Allocator* a = g_allocators[static_cast<int>(type)];
  if (a == nullptr && type == kCPU) a = &cpu_allocator();
  // The first CUDA tensor loads the CUDA backend, which installs its allocator.
  if (a == nullptr && type == kCUDA) {
    HG_CHECK(cuda::load_backend(), "allocate", "no allocator for device type {}: {}", type, cuda::backend_error());
    a = g_allocators[static_cast<int>(type)];
  }
  HG_CHECK(a != nullptr, "allocate", "no allocator for device type {}: halfgrad was built without CUDA support", type);
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { g_allocators[static_cast<int>(type)] = allocator; }

namespace {
struct Adopted {
  std::mutex mutex;
  std::unordered_map<const void*, Allocator*> owners;
};
Adopted& adopted() {
  static auto* a = new Adopted();  // never destroyed: storages may be freed at exit
  return *a;
}
// Lets every Storage free skip the lock while no block is adopted (no pinned memory in use).
constinit std::atomic<int64_t> g_adopted_count{0};
}  // namespace

void adopt_cpu_block(void* ptr, Allocator* owner) {
  Adopted& a = adopted();
  std::lock_guard lock(a.mutex);
  if (a.owners.emplace(ptr, owner).second) g_adopted_count.fetch_add(1);
}

Allocator* release_adopted_cpu_block(void* ptr) {
  if (g_adopted_count.load() == 0) return nullptr;
  Adopted& a = adopted();
  std::lock_guard lock(a.mutex);
  auto it = a.owners.find(ptr);
  if (it == a.owners.end()) return nullptr;
  Allocator* owner = it->second;
  a.owners.erase(it);
  g_adopted_count.fetch_sub(1);
  return owner;
}

Allocator* adopted_cpu_block_owner(const void* ptr) {
  if (g_adopted_count.load() == 0) return nullptr;
  Adopted& a = adopted();
  std::lock_guard lock(a.mutex);
  auto it = a.owners.find(ptr);
  return it == a.owners.end() ? nullptr : it->second;
}

MemoryStats cpu_memory_stats() { return cpu_allocator().stats(); }
void cpu_empty_cache() { cpu_allocator().empty_cache(); }

}  // namespace hg
