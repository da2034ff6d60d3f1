// hg::distributed: a process group and its collectives on CPU tensors, each returning a Work
// handle. Started by mpirun it runs over MPI; started torchrun-style (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT in the environment, no mpirun) over Gloo with a TCP rendezvous.
// docs/DISTRIBUTED.md explains the choice, timeouts and failures.
//
//   auto pg = hg::distributed::ProcessGroup::init();   // from the environment, on first use
//   pg->all_reduce(grad, hg::distributed::ReduceOp::Avg).wait();
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "framework/tensor.h"

namespace hg::distributed {

enum class ReduceOp { Sum, Avg, Max };

namespace detail {
class Backend;
}

// Which library carries the collectives on CPU tensors. Auto: MPI under mpirun (or mpiexec,
// srun with PMI); Gloo when WORLD_SIZE is set without an MPI launcher (torchrun-style); otherwise
// a group of one (MPI's singleton, or Gloo's, or Local in a build with neither). Local: a group
// of one in this process, no library (each collective is the identity, or a copy).
enum class Backend { Auto, Mpi, Gloo, Local };

// How all_reduce treats float16/bfloat16 tensors (other dtypes ignore it). Float32: they are
// converted to float32, reduced there and rounded once at the end (exact sums; twice the bytes
// on the wire). Native: they travel as 16 bits and every pairwise combine is rounded to 16 bits,
// as NCCL does (half the bytes; the rounding error grows with the number of ranks).
enum class Accumulate { Float32, Native };

struct ProcessGroupOptions {
  Backend backend = Backend::Auto;
  // wait() throws "[distributed] ... timed out" when a collective has not completed after this
  // many seconds (a peer died, threw, or called a different collective), instead of hanging.
  double timeout_s = 300.0;
};

// Whether this build has MPI or Gloo (Auto), or the one named (Local always). Without either, a
// process started alone still gets a group of one; a launched one gets "[distributed] built
// without MPI" (or Gloo).
bool is_available(Backend backend = Backend::Auto);

// An asynchronous collective. wait() blocks until completion or the group's timeout (then it
// throws "... timed out after N s"; a failed collective throws its backend's error), then writes the result into the
// tensors (16-bit results are converted back from float32). Waiting twice is harmless; a Work dropped without wait() is
// waited for by the group's destructor/finalize. Default-constructed: already complete.
class Work {
 public:
  struct Impl;
  Work() = default;
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  void wait();
  bool is_completed();  // tests once, never blocks (does not finish the 16-bit copy back)

 private:
  std::shared_ptr<Impl> impl_;
};

class ProcessGroup {
 public:
  // The world group of this process, initialised once from the environment (see Backend):
  // under mpirun MPI_COMM_WORLD, with MPI_THREAD_MULTIPLE when the MPI library offers it;
  // torchrun-style, a Gloo context over TCP whose rank 0 serves the rendezvous store on
  // MASTER_PORT. Run without either, a group of one. Later calls return the same group
  // (options then only set the timeout). Missing or malformed variables throw, naming them.

  static std::shared_ptr<ProcessGroup> init(ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  const char* backend() const;  // "mpi", "gloo" or "local" (a group of one without either)
  int world_size() const { return world_size_; }
  double timeout() const { return options_.timeout_s; }
  void set_timeout(double seconds);
  bool thread_multiple() const { return thread_multiple_; }

  // Collectives on contiguous tensors of float32/float64/float16/bfloat16 (16-bit ones are
  // reduced in float32 and rounded once at the end, unless Accumulate::Native). CPU tensors go
  // through MPI or Gloo; CUDA tensors (all on one device) through NCCL when the CUDA backend was
  // built with it, its communicator set up on the first CUDA collective, which every rank must
  // make. Every rank must call the same collectives in the same order, with the same shapes.
  // In place: tensor <- op over ranks (Avg = Sum / world_size).
  Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, Accumulate accumulate = Accumulate::Float32);
  // In place: tensor <- root's tensor.
  Work broadcast(const Tensor& tensor, int root = 0);
  // output [world_size, *input.shape] <- every rank's input, by rank.
  Work all_gather(const Tensor& output, const Tensor& input);
  // input [world_size * n, ...]: output [n, ...] <- op over ranks of this rank's n rows.
  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  Work barrier();

  // Ends the job at once (MPI_Abort ends every rank; under Gloo this process exits and its peers'
  // collectives fail as their connections close): what a failing rank calls so its peers stop
  // instead of waiting for their timeout. Does not return.
  [[noreturn]] void abort(int code = 1);

 private:
  ProcessGroup(ProcessGroupOptions options, std::unique_ptr<detail::Backend> backend);
  Work start(std::shared_ptr<Work::Impl> impl, std::string what);
  // The CPU backend for CPU tensors; for CUDA tensors the NCCL one, made on first use.
  detail::Backend& backend_for(const char* op, const Tensor& t);
  ProcessGroupOptions options_;
  std::unique_ptr<detail::Backend> backend_;
  std::mutex cuda_mutex_;
  std::unique_ptr<detail::Backend> cuda_backend_;
  int cuda_device_ = -1;
  int rank_ = 0;
  int world_size_ = 1;
  bool thread_multiple_ = false;
};

}  // namespace hg::distributed
