// The CPU-side face of the CUDA backend: forwards to the hooks kernels/cuda installs, and
// answers "no CUDA" when it is not linked in.
#include "framework/cuda.h"

#include <atomic>

#include "framework/error.h"

namespace hg {

namespace {
// constinit: the backend may install its hooks from a static initialiser in another file.
constinit std::atomic<bool> g_allow_tf32{false};
constinit cuda::CudaHooks* g_hooks = nullptr;

const cuda::CudaHooks& hooks(const char* op) {
  HG_CHECK(g_hooks != nullptr, op, "halfgrad was built without CUDA support (configure with -Dcuda=enabled)");
  return *g_hooks;
}
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

namespace cuda {

void set_cuda_hooks(CudaHooks* h) { g_hooks = h; }
bool is_built() { return g_hooks != nullptr; }
bool is_available() { return device_count() > 0; }
int device_count() { return g_hooks ? g_hooks->device_count() : 0; }
void synchronize() { hooks("cuda::synchronize").synchronize(); }
MemoryStats memory_stats(int device) { return hooks("cuda::memory_stats").memory_stats(device); }
void empty_cache() { hooks("cuda::empty_cache").empty_cache(); }
int64_t host_sync_count() { return g_hooks ? g_hooks->host_sync_count() : 0; }

}  // namespace cuda
}  // namespace hg
