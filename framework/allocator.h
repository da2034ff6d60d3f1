// Allocators per device type. The CPU one caches freed blocks by size class so a training loop
// in its steady state makes no new allocations; the CUDA one is installed by the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/device.h"

namespace hg {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
};

struct MemoryStats {
  int64_t allocated = 0;           // bytes handed out now
  int64_t reserved = 0;            // bytes held from the system, cached blocks included
  int64_t peak_allocated = 0;      // high-water mark of `allocated`
  int64_t system_allocations = 0;  // times the allocator had to ask the system for memory
};

Allocator* get_allocator(DeviceType type);  // throws when no allocator is installed for it
void set_allocator(DeviceType type, Allocator* allocator);

// CPU blocks that another allocator owns (page-locked memory from the CUDA backend): a CPU Storage
// whose data is such a block frees it through that owner, not through the CPU allocator.
void adopt_cpu_block(void* ptr, Allocator* owner);
// The owner of an adopted block, which is forgotten; nullptr for the CPU allocator's own blocks.
Allocator* release_adopted_cpu_block(void* ptr);
Allocator* adopted_cpu_block_owner(const void* ptr);

MemoryStats cpu_memory_stats();
void cpu_empty_cache();

}  // namespace hg
