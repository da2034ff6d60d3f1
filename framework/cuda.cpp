// The CPU-side face of the CUDA backend: loads the module kernels/cuda is built into on first
// use, forwards to the hooks it installs, and answers "no CUDA" when it is absent.
#include "framework/cuda.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "framework/capture_state.h"
#include "framework/cuda_backend.h"
#include "framework/error.h"
#include "framework/tensor.h"

namespace hg {

namespace {
// constinit: the backend may install its hooks from a static initialiser in another file.
constinit std::atomic<bool> g_allow_tf32{false};
constinit std::atomic<bool> g_cudnn_deterministic{false};
constinit cuda::CudaHooks* g_hooks = nullptr;

struct BackendLoad {
  std::once_flag once;
  std::string error;  // written once inside call_once, read after it
};
BackendLoad& backend_load() {
  static BackendLoad* b = new BackendLoad();  // never destroyed: tensors may outlive statics
  return *b;
}

// The module next to the libhalfgrad this code is in (found through one of its own symbols).
std::string backend_path() {
  if (const char* env = std::getenv("HG_CUDA_BACKEND"); env != nullptr && *env != '\0') return env;
  Dl_info info{};
  std::string dir = ".";
  if (dladdr(reinterpret_cast<void*>(&cuda::load_backend), &info) != 0 && info.dli_fname != nullptr) {
    const std::string self = info.dli_fname;
    const auto slash = self.rfind('/');
    if (slash != std::string::npos) dir = self.substr(0, slash);
  }
  return dir + "/libhalfgrad_cuda.so";
}

void open_backend(std::string& error) {
  // A program linked to the module directly (test_cuda) has it loaded already.
  if (g_hooks != nullptr) return;
  const std::string path = backend_path();
  if (access(path.c_str(), F_OK) != 0) {
    error = "halfgrad was built without CUDA support (no CUDA backend module at " + path + ")";
    return;
  }
  dlerror();
  // Never closed: its kernels stay registered for the life of the process.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    error = "the CUDA backend could not be loaded: " + std::string(why ? why : path);
    return;
  }
  if (g_hooks == nullptr) error = "the CUDA backend " + path + " was loaded but installed no hooks";
}

const cuda::CudaHooks& hooks(const char* op) {
  HG_CHECK(cuda::load_backend(), op, "{}", cuda::backend_error());
  return *g_hooks;
}
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }
void set_cudnn_deterministic(bool deterministic) {
  g_cudnn_deterministic.store(deterministic, std::memory_order_relaxed);
}
bool cudnn_deterministic() { return g_cudnn_deterministic.load(std::memory_order_relaxed); }

namespace cuda {

bool load_backend() {
  BackendLoad& b = backend_load();
  std::call_once(b.once, [&b] { open_backend(b.error); });
  return b.error.empty();
}
std::string backend_error() { return load_backend() ? std::string() : backend_load().error; }

void set_cuda_hooks(CudaHooks* h) { g_hooks = h; }
bool is_built() { return load_backend(); }
bool is_available() { return device_count() > 0; }
int device_count() { return load_backend() ? g_hooks->device_count() : 0; }
void synchronize() {
  capture::refuse_host_sync_any("cuda::synchronize", "synchronize");
  hooks("cuda::synchronize").synchronize();
}
MemoryStats memory_stats(int device) { return hooks("cuda::memory_stats").memory_stats(device); }
void empty_cache() {
  capture::refuse_host_sync_any("cuda::empty_cache", "free cached memory (cudaFree waits for the device)");
  hooks("cuda::empty_cache").empty_cache();
}
int64_t host_sync_count() { return load_backend() ? g_hooks->host_sync_count() : 0; }

Tensor pin_memory(const Tensor& t) {
  HG_CHECK(t.defined() && t.device().is_cpu(), "pin_memory", "needs a CPU tensor, got {}",
           t.defined() ? fmt::format("one on {}", t.device()) : std::string("an undefined one"));
  Allocator* pinned = hooks("pin_memory").pinned_allocator();
  if (is_pinned(t)) return t;
  const Tensor src = t.contiguous();
  const size_t nbytes = static_cast<size_t>(src.numel()) * element_size(src.dtype());
  if (nbytes == 0) return src;
  // A CPU storage over a block of the pinned allocator: freeing it hands the block back there.
  auto storage = std::make_shared<Storage>(0, Device(kCPU));
  storage->data = pinned->allocate(nbytes, Device(kCPU));
  storage->nbytes = nbytes;
  adopt_cpu_block(storage->data, pinned);
  std::memcpy(storage->data, src.raw_data(), nbytes);
  return Tensor(std::move(storage), src.shape(), contiguous_strides(src.shape()), 0, src.dtype());
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.storage()->data == nullptr || !load_backend()) return false;
  Allocator* pinned = g_hooks->pinned_allocator();
  return pinned != nullptr && adopted_cpu_block_owner(t.storage()->data) == pinned;
}

}  // namespace cuda
}  // namespace hg
