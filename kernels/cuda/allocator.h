// The caching device allocator: freed blocks are kept per (stream, size class) and handed out
// again, so a training loop in its steady state never calls cudaMalloc. Internal to kernels/cuda;
// users see it through hg::cuda::memory_stats() / empty_cache().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "framework/allocator.h"

namespace hg::cuda {

class CachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override;
  void deallocate(void* ptr, size_t nbytes, Device device) override;
  MemoryStats stats(int device);
  void empty_cache();
  // The size a request is rounded up to (exposed for tests and for the GEMM workspace).
  static size_t size_class(size_t nbytes);
};

CachingAllocator& caching_allocator();

}  // namespace hg::cuda
