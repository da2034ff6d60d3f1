// The CUDA runtime as the framework and user code see it: device queries, synchronisation,
// memory statistics, the host-synchronisation counter, the TF32 and cuDNN-determinism switches.
// No CUDA headers: the backend (kernels/cuda, loaded on first use) installs CudaHooks; without it
// is_available() is false and everything that needs a device throws "built without CUDA".
#pragma once

#include <cstdint>
#include <string>

#include "framework/allocator.h"

namespace hg {

class Tensor;

// Whether float32 matmuls on CUDA may use TF32 tensor cores (10-bit mantissa inputs, float32
// accumulation). Off by default, as in PyTorch >= 1.12.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Whether CUDA convolutions use only cuDNN algorithms that give bit-identical results from run to
// run (PyTorch's torch.backends.cudnn.deterministic): no engine that adds partial sums with
// atomics in no fixed order. Off by default; on, some passes may be slower. It covers cuDNN only:
// the scatter-style CUDA kernels (index_add, scatter_add, an embedding's gradient) still add with
// atomics.
void set_cudnn_deterministic(bool deterministic);
bool cudnn_deterministic();

namespace cuda {

bool is_built();  // the CUDA backend module (libhalfgrad_cuda.so) is present and loads
// Why is_built() is false (the dlerror text or the missing path); empty when it is true.
std::string backend_error();
bool is_available();  // built and at least one CUDA device is visible
int device_count();   // 0 when not available
// Blocks the host until all work queued on every device's current stream has finished.
// Counts as one host synchronisation.
void synchronize();
MemoryStats memory_stats(int device = 0);
// Returns cached, unused device blocks to the driver (allocated tensors are not touched).
void empty_cache();
// How many times the backend made the host wait for a device (stream syncs, device-to-host
// copies). A training step that should run ahead of the host checks this stays unchanged.
int64_t host_sync_count();

// A copy of the CPU tensor `t` in page-locked (pinned) host memory, from which copies to a GPU run
// asynchronously (PyTorch's Tensor::pin_memory); `t` itself when it is pinned already. Throws
// "[pin_memory] ..." without a CUDA backend.
Tensor pin_memory(const Tensor& t);
bool is_pinned(const Tensor& t);  // false without a CUDA backend

// What the backend installs (framework code never calls the CUDA runtime directly).
struct CudaHooks {
  virtual ~CudaHooks() = default;
  virtual int device_count() const = 0;
  virtual void synchronize() const = 0;
  virtual MemoryStats memory_stats(int device) const = 0;
  virtual void empty_cache() const = 0;
  virtual int64_t host_sync_count() const = 0;
  // Page-locked host memory; its blocks must stay valid until copies queued from them finish.
  virtual Allocator* pinned_allocator() const = 0;
};
void set_cuda_hooks(CudaHooks* hooks);

}  // namespace cuda
}  // namespace hg
