// The MPI backend: nonblocking MPI-3 collectives on MPI_COMM_WORLD, polled with MPI_Test
// against the wait's deadline.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/backend.h"
#include "framework/error.h"

#ifdef HG_WITH_MPI
#include <mpi.h>
#endif

namespace hg::distributed::detail {

#ifndef HG_WITH_MPI

bool mpi_built() { return false; }
std::unique_ptr<Backend> make_mpi_backend(double) { fail("distributed", "built without MPI"); }

#else

bool mpi_built() { return true; }

namespace {

std::mutex abandoned_mutex;
// Timed-out collectives: MPI may still write their buffers, so they stay alive until finalize.
std::vector<std::shared_ptr<Work::Impl> > abandoned;

std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, len);
}

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) fail("distributed", "{} failed: {}", call, mpi_error(rc));
}

struct MpiWork : Work::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  bool completed = false;

  bool test() override {
    if (completed) return true;
    int flag = 0;
    int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) fail("distributed", "{} failed on rank {}: {}", what, rank, mpi_error(rc));
    completed = flag != 0;
    return completed;
  }

  bool wait_until(Clock::time_point deadline) override {
    auto start = Clock::now();
    int spins = 0;
    while (!test()) {
      if (Clock::now() > deadline) return false;
      // MPI progresses a nonblocking collective only inside MPI calls, so poll hot (yielding the
      // core when ranks outnumber cores) for the first second; sleeping between tests made a
      // 2.7 MB all-reduce 2.5x slower. After a second a peer is late anyway: back off.
      if (++spins % 64 == 0 && Clock::now() - start > std::chrono::seconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      else
        std::this_thread::yield();
    }
    return true;
  }

  void abandon(const std::shared_ptr<Impl>& self) override {
    std::lock_guard lock(abandoned_mutex);
    abandoned.push_back(self);
  }
};

// Finalizes MPI at exit when halfgrad initialised it, after giving timed-out collectives a
// last chance to complete (a late peer may still post them).
struct Finalizer {
  bool owns = false;
  double timeout_s = 0;
  ~Finalizer() {
    if (!owns) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (auto& impl : abandoned) {
      auto& w = static_cast<MpiWork&>(*impl);
      while (!w.completed && std::chrono::steady_clock::now() < deadline) {
        int flag = 0;
        if (MPI_Test(&w.request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        w.completed = flag != 0;
        if (!w.completed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      // A collective that never completed would hang MPI_Finalize: end the job instead.
      if (!w.completed) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
};
Finalizer finalizer;

MPI_Datatype mpi_type(const Tensor& t) {
  if (is_reduced_float(t.dtype())) return MPI_UINT16_T;  // with the user ops below
  return t.dtype() == kFloat64 ? MPI_DOUBLE : MPI_FLOAT;
}

// MPI has no 16-bit float types: 16-bit reductions use user ops over uint16 bit patterns.
template <Dtype D, BufferOp Op>
void combine_user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  combine_16bit(D, Op, in, inout, inout, static_cast<size_t>(*len));
}

struct Ops16 {
  MPI_Op bf16_sum, bf16_max, f16_sum, f16_max;
  Ops16() {  // after MPI_Init
    MPI_Op_create(&combine_user_op<kBFloat16, BufferOp::Sum>, 1, &bf16_sum);
    MPI_Op_create(&combine_user_op<kBFloat16, BufferOp::Max>, 1, &bf16_max);
    MPI_Op_create(&combine_user_op<kFloat16, BufferOp::Sum>, 1, &f16_sum);
    MPI_Op_create(&combine_user_op<kFloat16, BufferOp::Max>, 1, &f16_max);
  }
};

MPI_Op mpi_op(const Tensor& t, BufferOp op) {
  if (!is_reduced_float(t.dtype())) return op == BufferOp::Max ? MPI_MAX : MPI_SUM;
  static const Ops16 ops;
  if (t.dtype() == kBFloat16) return op == BufferOp::Max ? ops.bf16_max : ops.bf16_sum;
  return op == BufferOp::Max ? ops.f16_max : ops.f16_sum;
}
int mpi_count(const Tensor& t) { return static_cast<int>(t.numel()); }
int mpi_bytes(const Tensor& t) { return static_cast<int>(t.numel() * static_cast<int64_t>(element_size(t.dtype()))); }

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(double timeout_s) {
    set_timeout(timeout_s);
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      finalizer.owns = true;
    } else {
      MPI_Query_thread(&provided);
    }
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
    // Errors come back as codes (turned into hg::Error) instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  }

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool thread_multiple() const override { return thread_multiple_; }
  void set_timeout(double seconds) override { finalizer.timeout_s = seconds; }

  std::shared_ptr<Work::Impl> all_reduce(const Tensor& buf, BufferOp op) override {
    auto w = std::make_shared<MpiWork>();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), mpi_count(buf), mpi_type(buf), mpi_op(buf, op),
                             MPI_COMM_WORLD, &w->request),
              "MPI_Iallreduce");
    return w;
  }

  std::shared_ptr<Work::Impl> broadcast(const Tensor& buf, int root) override {
    auto w = std::make_shared<MpiWork>();
    check_mpi(MPI_Ibcast(buf.raw_data(), mpi_bytes(buf), MPI_BYTE, root, MPI_COMM_WORLD, &w->request), "MPI_Ibcast");
    return w;
  }

  std::shared_ptr<Work::Impl> all_gather(const Tensor& output, const Tensor& input) override {
    auto w = std::make_shared<MpiWork>();
    check_mpi(MPI_Iallgather(input.raw_data(), mpi_bytes(input), MPI_BYTE, output.raw_data(), mpi_bytes(input),
                             MPI_BYTE, MPI_COMM_WORLD, &w->request),
              "MPI_Iallgather");
    return w;
  }

  std::shared_ptr<Work::Impl> reduce_scatter(const Tensor& output, const Tensor& input, BufferOp op) override {
    auto w = std::make_shared<MpiWork>();
    check_mpi(MPI_Ireduce_scatter_block(input.raw_data(), output.raw_data(), mpi_count(output), mpi_type(output),
                                        mpi_op(output, op), MPI_COMM_WORLD, &w->request),
              "MPI_Ireduce_scatter_block");
    return w;
  }

  std::shared_ptr<Work::Impl> barrier() override {
    auto w = std::make_shared<MpiWork>();
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &w->request), "MPI_Ibarrier");
    return w;
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

 private:
  int rank_ = 0;
  int world_size_ = 1;
  bool thread_multiple_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(double timeout_s) { return std::make_unique<MpiBackend>(timeout_s); }

#endif

}  // namespace hg::distributed::detail
