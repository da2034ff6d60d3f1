// Inside hg::distributed (not installed): what a communication backend implements under
// ProcessGroup, and the in-flight state of one collective. ProcessGroup checks the tensors,
// stages 16-bit ones in float32 and turns Avg into Sum plus a division; a backend only moves
// and reduces contiguous CPU buffers. Backends: MPI (mpi_backend.cpp), Gloo (gloo_backend.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace hg::distributed {

struct Work::Impl {
  using Clock = std::chrono::steady_clock;
  std::string what;  // "all_reduce of [4, 3] float32"
  int rank = 0;
  double timeout_s = 0;
  std::function<void()> finish;  // copies a float32 staging buffer back, divides for Avg
  bool finished = false;
  Tensor keep_alive[2];  // buffers the backend reads or writes until completion

  virtual ~Impl() = default;
  // Whether the collective completed; never blocks. Throws hg::Error when it failed.
  virtual bool test() = 0;
  // Blocks until completion (true) or the deadline (false). Throws hg::Error when it failed.
  virtual bool wait_until(Clock::time_point deadline) = 0;
  // Called once when wait() gave up: a backend that may still write the buffers keeps self alive.
  virtual void abandon(const std::shared_ptr<Impl>& self) { (void)self; }
};

namespace detail {

// Reductions the backends see: Avg arrives as Sum (ProcessGroup divides afterwards).
enum class BufferOp { Sum, Max };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual bool thread_multiple() const = 0;
  virtual void set_timeout(double seconds) = 0;
  // Each starts one collective and returns its handle; the caller fills in what, rank, timeout,
  // finish and keep_alive. all_reduce takes float32, float64 or (reduced natively, with
  // combine_16bit) float16/bfloat16 buffers; reduce_scatter float32 or float64; the others move bytes.
  virtual std::shared_ptr<Work::Impl> all_reduce(const Tensor& buffer, BufferOp op) = 0;
  virtual std::shared_ptr<Work::Impl> broadcast(const Tensor& buffer, int root) = 0;
  virtual std::shared_ptr<Work::Impl> all_gather(const Tensor& output, const Tensor& input) = 0;
  virtual std::shared_ptr<Work::Impl> reduce_scatter(const Tensor& output, const Tensor& input, BufferOp op) = 0;
  virtual std::shared_ptr<Work::Impl> barrier() = 0;
  [[noreturn]] virtual void abort(int code) = 0;
};

// out[i] = a[i] op b[i] for float16/bfloat16 values (dtype), computed in float32 and rounded once:
// one step of a native 16-bit reduction. out may alias a or b.
void combine_16bit(Dtype dtype, BufferOp op, const void* a, const void* b, void* out, size_t n);

// nullptr in a build without the library.
std::unique_ptr<Backend> make_mpi_backend(double timeout_s);
// Rendezvous through a TcpStore at master_addr:master_port (rank 0 serves it); world_size 1
// needs no store.
std::unique_ptr<Backend> make_gloo_backend(int rank, int world_size, const std::string& master_addr, int master_port,
                                           double timeout_s);
bool mpi_built();
bool gloo_built();
// A group of one without any library (local_backend.cpp).
std::unique_ptr<Backend> make_local_backend();

// What the CUDA module installs when it was built with NCCL (nccl_backend.cpp, linked into
// libhalfgrad_cuda): ProcessGroup makes a backend for CUDA tensors from it on the first
// collective on one, with rank 0's unique id broadcast through the group's CPU backend.
// Its Work never blocks, so the group's own wait applies the timeout: make takes none.
struct NcclFactory {
  size_t id_bytes;                   // sizeof(ncclUniqueId)
  std::vector<char> (*unique_id)();  // ncclGetUniqueId's bytes, called on rank 0 only
  std::unique_ptr<Backend> (*make)(int rank, int world_size, const std::vector<char>& id, int device);
};
void set_nccl_factory(const NcclFactory* factory);
const NcclFactory* nccl_factory();  // nullptr until a CUDA module with NCCL has loaded

}  // namespace detail
}  // namespace hg::distributed
