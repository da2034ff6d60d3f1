// The caching device allocator: freed blocks are kept per (pool, stream, size) and handed out
// again (large ones split to fit and merged back, block_cache.h), so a training loop in its steady
// state never calls cudaMalloc. Internal to kernels/cuda;
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

  // CUDA graphs' private pools. While a capture records on `device`, every allocation there comes
  // from the capture's pool, and every block freed there joins it (the recorded kernels may still
  // use it); its blocks are never handed to work outside the graph and empty_cache() leaves them
  // alone. release_pool frees the pool's cached blocks (and its blocks still held by tensors when
  // they are freed); the graph calls it when destroyed.
  uint64_t begin_capture_pool(int device);
  void end_capture_pool(int device);
  void release_pool(int device, uint64_t pool) noexcept;
  // Bytes of the blocks (in use and cached) of `pool` (0: the ordinary pool) on `device`.
  int64_t pool_reserved(int device, uint64_t pool);
  // The same summed over the pools of the graphs alive on `device`.
  int64_t graph_pools_reserved(int device);
};

CachingAllocator& caching_allocator();

}  // namespace hg::cuda
