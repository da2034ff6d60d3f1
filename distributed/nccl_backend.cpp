// The NCCL backend for CUDA tensors, part of the CUDA module (libhalfgrad_cuda): it installs a
// NcclFactory when the module loads; ProcessGroup makes one backend per process on the first
// CUDA collective. Collectives are queued on halfgrad's stream of the tensor's device, so they
// are ordered after the kernels that produced the data and before those that use the result;
// Work waits for an event recorded after them (polling, so a timeout can fire).
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "distributed/backend.h"
#include "framework/error.h"
#include "kernels/cuda/runtime.h"

namespace hg::distributed::detail {

namespace {

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess && r != ncclInProgress) fail("distributed", "{} failed: {}", call, ncclGetErrorString(r));
}

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail("distributed", "{} failed: {}", call, cudaGetErrorString(e));
}

ncclDataType_t nccl_type(Dtype d) {
  switch (d) {
    case Dtype::Float64: return ncclFloat64;
    case Dtype::Float16: return ncclFloat16;
    case Dtype::BFloat16: return ncclBfloat16;
    default: return ncclFloat32;
  }
}

ncclRedOp_t nccl_op(BufferOp op) { return op == BufferOp::Max ? ncclMax : ncclSum; }

size_t byte_count(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

struct NcclWork : Work::Impl {
  ncclComm_t comm = nullptr;
  cudaEvent_t event = nullptr;
  bool completed = false;

  ~NcclWork() override {
    if (event) cudaEventDestroy(event);
  }
  bool test() override {
    if (completed) return true;
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return completed = true;
    if (e != cudaErrorNotReady) fail("distributed", "{} failed on rank {}: {}", what, rank, cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      fail("distributed", "{} failed on rank {}: {}", what, rank, ncclGetErrorString(async));
    return false;
  }
  bool wait_until(Clock::time_point deadline) override {
    while (!test()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return true;
  }
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(int rank, int world_size, const std::vector<char>& id, int device)
      : rank_(rank), world_size_(world_size), device_(device) {
    HG_CHECK(id.size() == sizeof(ncclUniqueId), "distributed", "NCCL: the unique id has {} bytes, expected {}",
             id.size(), sizeof(ncclUniqueId));
    ncclUniqueId unique{};
    std::memcpy(&unique, id.data(), sizeof unique);
    cuda::DeviceGuard guard(device_);
    check_nccl(ncclCommInitRank(&comm_, world_size, unique, rank), "ncclCommInitRank");
    check_cuda(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc");
  }
  // The communicator and the barrier word live until the process exits: at exit the CUDA
  // runtime may already be torn down when a static group is destroyed.
  ~NcclBackend() override = default;

  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool thread_multiple() const override { return true; }
  void set_timeout(double) override {}  // Work polls; the group's wait applies the timeout

  std::shared_ptr<Work::Impl> all_reduce(const Tensor& buf, BufferOp op) override {
    return enqueue("ncclAllReduce", [&](cudaStream_t s) {
      return ncclAllReduce(buf.raw_data(), buf.raw_data(), static_cast<size_t>(buf.numel()), nccl_type(buf.dtype()),
                           nccl_op(op), comm_, s);
    });
  }
  std::shared_ptr<Work::Impl> broadcast(const Tensor& buf, int root) override {
    return enqueue("ncclBroadcast", [&](cudaStream_t s) {
      return ncclBroadcast(buf.raw_data(), buf.raw_data(), byte_count(buf), ncclUint8, root, comm_, s);
    });
  }
  std::shared_ptr<Work::Impl> all_gather(const Tensor& output, const Tensor& input) override {
    return enqueue("ncclAllGather", [&](cudaStream_t s) {
      return ncclAllGather(input.raw_data(), output.raw_data(), byte_count(input), ncclUint8, comm_, s);
    });
  }
  std::shared_ptr<Work::Impl> reduce_scatter(const Tensor& output, const Tensor& input, BufferOp op) override {
    return enqueue("ncclReduceScatter", [&](cudaStream_t s) {
      return ncclReduceScatter(input.raw_data(), output.raw_data(), static_cast<size_t>(output.numel()),
                               nccl_type(output.dtype()), nccl_op(op), comm_, s);
    });
  }
  // An all-reduce of one float on the device, as PyTorch's NCCL barrier.
  std::shared_ptr<Work::Impl> barrier() override {
    return enqueue("ncclAllReduce (barrier)", [&](cudaStream_t s) {
      return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, s);
    });
  }
  [[noreturn]] void abort(int code) override {
    ncclCommAbort(comm_);
    std::_Exit(code);
  }

 private:
  template <class Launch>
  std::shared_ptr<Work::Impl> enqueue(const char* call, Launch launch) {
    cuda::DeviceGuard guard(device_);
    cudaStream_t stream = cuda::current_stream(device_);
    check_nccl(launch(stream), call);
    auto w = std::make_shared<NcclWork>();
    w->comm = comm_;
    check_cuda(cudaEventCreateWithFlags(&w->event, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(w->event, stream), "cudaEventRecord");
    return w;
  }

  int rank_, world_size_, device_;
  ncclComm_t comm_ = nullptr;
  void* barrier_word_ = nullptr;
};

std::vector<char> unique_id() {
  ncclUniqueId id{};
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::vector<char>(id.internal, id.internal + sizeof id.internal);
}

std::unique_ptr<Backend> make(int rank, int world_size, const std::vector<char>& id, int device) {
  return std::make_unique<NcclBackend>(rank, world_size, id, device);
}

const NcclFactory factory{sizeof(ncclUniqueId), &unique_id, &make};
[[maybe_unused]] const bool installed = [] {
  set_nccl_factory(&factory);
  return true;
}();

}  // namespace

}  // namespace hg::distributed::detail
