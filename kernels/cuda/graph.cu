// CUDA graph capture and replay on the device's one stream (the backend of hg::cuda::Graph):
// a private memory pool per graph, the seed table its random kernels read, instantiate, launch.
#include "kernels/cuda/graph.h"

#include <array>
#include <atomic>
#include <memory>
#include <thread>

#include "framework/capture_state.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace hg::cuda {

namespace {

constexpr int kMaxGraphDevices = 64;
std::array<std::atomic<const uint64_t*>, kMaxGraphDevices> g_seed_tables{};
// The thread recording (random_u64 hands out slots on that thread only).
std::array<std::atomic<std::thread::id>, kMaxGraphDevices> g_seed_threads{};

class CudaGraph final : public capture::GraphBackend {
 public:
  ~CudaGraph() override { release(); }

  void begin(int device) override {
    HG_CHECK(!detail::sync_debug(), "cuda::Graph",
             "cannot capture with HG_CUDA_SYNC_DEBUG set: it waits for every kernel; unset it");
    device_ = device;
    DeviceGuard guard(device);
    HG_CUDA_CHECK(cudaMalloc(&seeds_, sizeof(uint64_t) * capture::kMaxSeedSlots));
    pool_ = caching_allocator().begin_capture_pool(device);
    pool_open_ = true;
    g_seed_threads[static_cast<size_t>(device)].store(std::this_thread::get_id());
    g_seed_tables[static_cast<size_t>(device)].store(seeds_);
    // Thread-local mode: this thread's unsafe calls fail (halfgrad refuses them first, by name);
    // other threads (a DataLoader's pinned copies) keep working on their own.
    const cudaError_t e = cudaStreamBeginCapture(current_stream(device), cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      stop_recording();
      HG_CUDA_CHECK(e);
    }
    recording_ = true;
  }

  void end() override {
    DeviceGuard guard(device_);
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(current_stream(device_), &graph);
    recording_ = false;
    stop_recording();
    if (e != cudaSuccess || graph == nullptr) {
      (void)cudaGetLastError();
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      fail("cuda::Graph",
           "the capture was invalidated ({}): something in the step used the device in a way a graph cannot record "
           "(another stream, a synchronous CUDA call, a legacy-stream copy)",
           cudaGetErrorString(e));
    }
    graph_ = graph;
    HG_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }

  void abort() noexcept override {
    if (recording_) {
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(current_stream(device_), &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      recording_ = false;
    }
    stop_recording();
  }

  void replay(const uint64_t* seeds, int64_t n) override {
    DeviceGuard guard(device_);
    cudaStream_t stream = current_stream(device_);
    // From pageable memory: staged before cudaMemcpyAsync returns, so the caller's vector may go.
    if (n > 0)
      HG_CUDA_CHECK(
          cudaMemcpyAsync(seeds_, seeds, sizeof(uint64_t) * static_cast<size_t>(n), cudaMemcpyHostToDevice, stream));
    HG_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  }

 private:
  void stop_recording() noexcept {
    if (pool_open_) {
      pool_open_ = false;
      g_seed_tables[static_cast<size_t>(device_)].store(nullptr);
      try {
        caching_allocator().end_capture_pool(device_);
      } catch (...) {
      }
    }
  }

  // Destroys the graph, then frees the seed table and the pool (after the last replay finished:
  // release_pool waits for the device before its cudaFree).
  void release() noexcept {
    if (device_ < 0) return;
    abort();
    try {
      DeviceGuard guard(device_);
      if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
      if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
      if (pool_ != 0) caching_allocator().release_pool(device_, pool_);
      if (seeds_ != nullptr) (void)cudaFree(seeds_);
    } catch (...) {
    }
    (void)cudaGetLastError();
    device_ = -1;
  }

  int device_ = -1;
  bool recording_ = false;
  bool pool_open_ = false;  // this graph's capture owns the device's capture pool and seed table
  uint64_t* seeds_ = nullptr;
  uint64_t pool_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

[[maybe_unused]] const bool g_graph_factory_installed = [] {
  capture::set_graph_factory([]() -> std::unique_ptr<capture::GraphBackend> { return std::make_unique<CudaGraph>(); });
  return true;
}();

}  // namespace

const uint64_t* capture_seed_table(int device) {
  if (device < 0 || device >= kMaxGraphDevices) return nullptr;
  const uint64_t* table = g_seed_tables[static_cast<size_t>(device)].load();
  if (table == nullptr || g_seed_threads[static_cast<size_t>(device)].load() != std::this_thread::get_id())
    return nullptr;
  return table;
}

int64_t graph_pool_bytes(int device) { return caching_allocator().graph_pools_reserved(device); }

}  // namespace hg::cuda
