// MPI process group: nonblocking MPI collectives (MPI-3) polled with MPI_Test against a deadline.
#include "distributed/process_group.h"

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "framework/error.h"
#include "framework/grad_mode.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"

#ifdef HG_WITH_MPI
#include <mpi.h>
#endif

namespace hg::distributed {

bool is_available() {
#ifdef HG_WITH_MPI
  return true;
#else
  return false;
#endif
}

#ifndef HG_WITH_MPI

struct Work::Impl {};
void Work::wait() {}
bool Work::is_completed() { return true; }
std::shared_ptr<ProcessGroup> ProcessGroup::init(ProcessGroupOptions) {
  fail("distributed", "built without MPI: install libopenmpi-dev and reconfigure with -Dmpi=enabled");
}
ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(options) {}
ProcessGroup::~ProcessGroup() = default;
void ProcessGroup::set_timeout(double) { fail("distributed", "built without MPI"); }
Work ProcessGroup::all_reduce(const Tensor&, ReduceOp) { fail("distributed", "built without MPI"); }
Work ProcessGroup::broadcast(const Tensor&, int) { fail("distributed", "built without MPI"); }
Work ProcessGroup::all_gather(const Tensor&, const Tensor&) { fail("distributed", "built without MPI"); }
Work ProcessGroup::reduce_scatter(const Tensor&, const Tensor&, ReduceOp) { fail("distributed", "built without MPI"); }
Work ProcessGroup::barrier() { fail("distributed", "built without MPI"); }
void ProcessGroup::abort(int) { fail("distributed", "built without MPI"); }

#else

struct Work::Impl {
  std::string what;  // "all_reduce of [4, 3] float32"
  int rank = 0;
  double timeout_s = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  bool completed = false;
  bool finished = false;
  std::function<void()> finish;  // copies a float32 staging buffer back, divides for Avg
  Tensor keep_alive[2];          // buffers MPI reads or writes until completion
};

namespace {

std::mutex abandoned_mutex;
// Timed-out collectives: MPI may still write their buffers, so they stay alive until finalize.
std::vector<std::shared_ptr<Work::Impl> > abandoned;

bool test_once(Work::Impl& w) {
  if (w.completed) return true;
  int flag = 0;
  int rc = MPI_Test(&w.request, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail("distributed", "{} failed on rank {}: {}", w.what, w.rank, std::string(text, len));
  }
  w.completed = flag != 0;
  return w.completed;
}

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
    for (auto& w : abandoned) {
      while (!w->completed && std::chrono::steady_clock::now() < deadline) {
        int flag = 0;
        if (MPI_Test(&w->request, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        w->completed = flag != 0;
        if (!w->completed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      // A collective that never completed would hang MPI_Finalize: end the job instead.
      if (!w->completed) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
};
Finalizer finalizer;

std::string describe(const char* op, const Tensor& t) {
  return fmt::format("{} of [{}] {}", op, fmt::join(t.shape(), ", "), dtype_name(t.dtype()));
}

void check_tensor(const char* op, const Tensor& t) {
  HG_CHECK(t.defined(), "distributed", "{}: the tensor is undefined", op);
  HG_CHECK(t.device().is_cpu(), "distributed", "{}: MPI collectives take CPU tensors, got one on {}", op, t.device());
  HG_CHECK(t.is_contiguous(), "distributed", "{}: the tensor of shape [{}] must be contiguous", op,
           fmt::join(t.shape(), ", "));
  Dtype d = t.dtype();
  HG_CHECK(d == kFloat32 || d == kFloat64 || d == kFloat16 || d == kBFloat16, "distributed",
           "{}: dtype {} is not supported (float32, float64, float16, bfloat16)", op, dtype_name(d));
}

MPI_Datatype mpi_type(Dtype d) { return d == kFloat64 ? MPI_DOUBLE : MPI_FLOAT; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// The buffer MPI works on: the tensor itself, or a float32 copy of a 16-bit tensor.
Tensor staging(const Tensor& t) {
  if (!is_reduced_float(t.dtype())) return t;
  NoGradGuard no_grad;
  return to(t, t.device(), kFloat32);
}

// What wait() runs once a reduction finished: the staged result divided by the world size for
// Avg and written back into the caller's tensor, or nothing when MPI wrote it in place as is.
std::function<void()> finish_into(const Tensor& staged, const Tensor& target, bool avg, double world) {
  if (!avg && staged.is_same(target)) return nullptr;
  return [staged, target, avg, world] {
    NoGradGuard no_grad;
    Tensor(target).copy_(avg ? staged * (1.0 / world) : staged);
  };
}

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("distributed", "{} failed: {}", call, std::string(text, len));
}

}  // namespace

void Work::wait() {
  if (!impl_) return;
  Impl& w = *impl_;
  if (!w.completed) {
    auto start = std::chrono::steady_clock::now();
    auto deadline = start + std::chrono::duration<double>(w.timeout_s);
    int spins = 0;
    while (!test_once(w)) {
      if (std::chrono::steady_clock::now() > deadline) {
        {
          std::lock_guard lock(abandoned_mutex);
          abandoned.push_back(impl_);
        }
        fail("distributed",
             "{} on rank {} timed out after {} s: a peer rank failed, exited or called a different collective", w.what,
             w.rank, w.timeout_s);
      }
      // MPI progresses a nonblocking collective only inside MPI calls, so poll hot (yielding the
      // core when ranks outnumber cores) for the first second; sleeping between tests made a
      // 2.7 MB all-reduce 2.5x slower. After a second a peer is late anyway: back off.
      if (++spins % 64 == 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      else
        std::this_thread::yield();
    }
  }
  if (!w.finished) {
    w.finished = true;
    if (w.finish) w.finish();
  }
}

bool Work::is_completed() { return !impl_ || test_once(*impl_); }

std::shared_ptr<ProcessGroup> ProcessGroup::init(ProcessGroupOptions options) {
  static std::mutex m;
  static std::shared_ptr<ProcessGroup> world;
  std::lock_guard lock(m);
  if (world) {
    world->set_timeout(options.timeout_s);
    return world;
  }
  world = std::shared_ptr<ProcessGroup>(new ProcessGroup(options));
  return world;
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(options) {
  set_timeout(options.timeout_s);
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

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::set_timeout(double seconds) {
  HG_CHECK(seconds > 0, "distributed", "the timeout must be positive, got {} s", seconds);
  options_.timeout_s = seconds;
  finalizer.timeout_s = seconds;
}

Work ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor);
  auto w = std::make_shared<Work::Impl>();
  w->what = describe("all_reduce", tensor);
  w->rank = rank_;
  w->timeout_s = options_.timeout_s;
  Tensor buf = staging(tensor);
  w->keep_alive[0] = buf;
  w->keep_alive[1] = tensor;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.raw_data(), static_cast<int>(buf.numel()), mpi_type(buf.dtype()),
                           mpi_op(op), MPI_COMM_WORLD, &w->request),
            "MPI_Iallreduce");
  w->finish = finish_into(buf, tensor, op == ReduceOp::Avg && world_size_ > 1, world_size_);
  return Work(w);
}

Work ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_tensor("broadcast", tensor);
  HG_CHECK(root >= 0 && root < world_size_, "distributed", "broadcast: root {} is not a rank of a group of {}", root,
           world_size_);
  auto w = std::make_shared<Work::Impl>();
  w->what = describe("broadcast", tensor);
  w->rank = rank_;
  w->timeout_s = options_.timeout_s;
  w->keep_alive[0] = tensor;
  // Bytes: a broadcast moves values unchanged, so 16-bit tensors need no float32 staging.
  check_mpi(MPI_Ibcast(tensor.raw_data(), static_cast<int>(tensor.numel() * (int64_t)element_size(tensor.dtype())),
                       MPI_BYTE, root, MPI_COMM_WORLD, &w->request),
            "MPI_Ibcast");
  return Work(w);
}

Work ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_tensor("all_gather", input);
  check_tensor("all_gather", output);
  HG_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * world_size_ && output.dim() >= 1 &&
               output.size(0) == world_size_,
           "distributed", "all_gather: output [{}] {} must be [{}, {}] {} for input [{}] in a group of {}",
           fmt::join(output.shape(), ", "), dtype_name(output.dtype()), world_size_, fmt::join(input.shape(), ", "),
           dtype_name(input.dtype()), fmt::join(input.shape(), ", "), world_size_);
  auto w = std::make_shared<Work::Impl>();
  w->what = describe("all_gather", input);
  w->rank = rank_;
  w->timeout_s = options_.timeout_s;
  w->keep_alive[0] = input;
  w->keep_alive[1] = output;
  int bytes = static_cast<int>(input.numel() * element_size(input.dtype()));
  check_mpi(MPI_Iallgather(input.raw_data(), bytes, MPI_BYTE, output.raw_data(), bytes, MPI_BYTE, MPI_COMM_WORLD,
                           &w->request),
            "MPI_Iallgather");
  return Work(w);
}

Work ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("reduce_scatter", input);
  check_tensor("reduce_scatter", output);
  HG_CHECK(output.dtype() == input.dtype() && input.numel() == output.numel() * world_size_, "distributed",
           "reduce_scatter: input [{}] {} must hold {} times output [{}] {}", fmt::join(input.shape(), ", "),
           dtype_name(input.dtype()), world_size_, fmt::join(output.shape(), ", "), dtype_name(output.dtype()));
  auto w = std::make_shared<Work::Impl>();
  w->what = describe("reduce_scatter", input);
  w->rank = rank_;
  w->timeout_s = options_.timeout_s;
  Tensor in = staging(input);
  Tensor out = staging(output);
  w->keep_alive[0] = in;
  w->keep_alive[1] = out;
  check_mpi(MPI_Ireduce_scatter_block(in.raw_data(), out.raw_data(), static_cast<int>(out.numel()),
                                      mpi_type(out.dtype()), mpi_op(op), MPI_COMM_WORLD, &w->request),
            "MPI_Ireduce_scatter_block");
  w->finish = finish_into(out, output, op == ReduceOp::Avg && world_size_ > 1, world_size_);
  return Work(w);
}

Work ProcessGroup::barrier() {
  auto w = std::make_shared<Work::Impl>();
  w->what = "barrier";
  w->rank = rank_;
  w->timeout_s = options_.timeout_s;
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &w->request), "MPI_Ibarrier");
  return Work(w);
}

void ProcessGroup::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

#endif

}  // namespace hg::distributed
