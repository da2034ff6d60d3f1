// ProcessGroup: picks a backend from the environment, checks every collective's tensors once,
// stages 16-bit tensors in float32, and waits for Work with the group's timeout.
#include "distributed/process_group.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "distributed/backend.h"
#include "framework/capture_state.h"
#include "framework/cuda.h"
#include "framework/error.h"
#include "framework/grad_mode.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"

namespace hg::distributed {

bool is_available(Backend backend) {
  switch (backend) {
    case Backend::Mpi: return detail::mpi_built();
    case Backend::Gloo: return detail::gloo_built();
    case Backend::Local: return true;
    case Backend::Auto: break;
  }
  return detail::mpi_built() || detail::gloo_built();
}

void Work::wait() {
  if (!impl_) return;
  Impl& w = *impl_;
  auto deadline = Impl::Clock::now() +
                  std::chrono::duration_cast<Impl::Clock::duration>(std::chrono::duration<double>(w.timeout_s));
  if (!w.wait_until(deadline)) {
    w.abandon(impl_);
    fail("distributed",
         "{} on rank {} timed out after {} s: a peer rank failed, exited or called a different collective", w.what,
         w.rank, w.timeout_s);
  }
  if (!w.finished) {
    w.finished = true;
    if (w.finish) w.finish();
  }
}

bool Work::is_completed() { return !impl_ || impl_->test(); }

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// An integer environment variable, or an error naming it.
int env_int(const char* name, int lo, int hi) {
  const char* v = env(name);
  HG_CHECK(v, "distributed", "{} is not set: torchrun-style start needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
           name);
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  HG_CHECK(*end == '\0' && x >= lo && x <= hi, "distributed", "{}='{}' must be an integer in [{}, {}]", name, v, lo,
           hi);
  return static_cast<int>(x);
}

bool launched_by_mpi() {
  return env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK") || env("MPI_LOCALNRANKS");
}

std::unique_ptr<detail::Backend> make_backend(const ProcessGroupOptions& options) {
  Backend choice = options.backend;
  if (choice == Backend::Auto) {
    if (launched_by_mpi())
      choice = Backend::Mpi;
    else if (env("WORLD_SIZE"))
      choice = Backend::Gloo;
    else if (detail::mpi_built())
      choice = Backend::Mpi;
    else if (detail::gloo_built())
      choice = Backend::Gloo;
    else
      return detail::make_local_backend();  // a group of one needs no library
  }
  if (choice == Backend::Local) return detail::make_local_backend();
  HG_CHECK(is_available(choice), "distributed", "built without {}: install {} and reconfigure",
           choice == Backend::Mpi ? "MPI" : "Gloo", choice == Backend::Mpi ? "libopenmpi-dev" : "libgloo-dev");
  if (choice == Backend::Mpi) return detail::make_mpi_backend(options.timeout_s);
  if (!env("WORLD_SIZE")) return detail::make_gloo_backend(0, 1, "", 0, options.timeout_s);  // a group of one
  int world = env_int("WORLD_SIZE", 1, 1 << 20);
  int rank = env_int("RANK", 0, world - 1);
  if (world == 1) return detail::make_gloo_backend(0, 1, "", 0, options.timeout_s);
  const char* addr = env("MASTER_ADDR");
  HG_CHECK(addr, "distributed",
           "MASTER_ADDR is not set: torchrun-style start needs RANK, WORLD_SIZE, MASTER_ADDR "
           "and MASTER_PORT");
  int port = env_int("MASTER_PORT", 1, 65535);
  return detail::make_gloo_backend(rank, world, addr, port, options.timeout_s);
}

// A Work completes through host-side polling and a host-side finish, which a CUDA graph's replay
// would not run (docs/DISTRIBUTED.md, "CUDA graphs").
constexpr const char* kCollectiveInCapture =
    "run a collective (its Work completes by polling the device from the host and finishing on the host, which a "
    "replay would skip; train data-parallel steps eagerly, docs/DISTRIBUTED.md)";

void check_tensor(const char* op, const Tensor& t) {
  HG_CHECK(t.defined(), "distributed", "{}: the tensor is undefined", op);
  capture::refuse_host_sync(op, t.device(), kCollectiveInCapture);
  HG_CHECK(t.is_contiguous(), "distributed", "{}: the tensor of shape [{}] must be contiguous", op,
           fmt::join(t.shape(), ", "));
  Dtype d = t.dtype();
  HG_CHECK(d == kFloat32 || d == kFloat64 || d == kFloat16 || d == kBFloat16, "distributed",
           "{}: dtype {} is not supported (float32, float64, float16, bfloat16)", op, dtype_name(d));
}

void check_same_device(const char* op, const Tensor& output, const Tensor& input) {
  HG_CHECK(output.device() == input.device(), "distributed", "{}: output on {} and input on {} must share a device", op,
           output.device(), input.device());
}

std::string describe(const char* op, const Tensor& t) {
  return fmt::format("{} of [{}] {}", op, fmt::join(t.shape(), ", "), dtype_name(t.dtype()));
}

detail::BufferOp buffer_op(ReduceOp op) { return op == ReduceOp::Max ? detail::BufferOp::Max : detail::BufferOp::Sum; }

// The buffer a reduction works on: the tensor itself, or a float32 copy of a 16-bit tensor.
Tensor staging(const Tensor& t) {
  if (!is_reduced_float(t.dtype())) return t;
  NoGradGuard no_grad;
  return to(t, t.device(), kFloat32);
}

// What wait() runs once a reduction finished: the staged result divided by the world size for
// Avg and written back into the caller's tensor, or nothing when the backend wrote it in place as is.
std::function<void()> finish_into(const Tensor& staged, const Tensor& target, bool avg, double world) {
  if (!avg && staged.is_same(target)) return nullptr;
  return [staged, target, avg, world] {
    NoGradGuard no_grad;
    Tensor(target).copy_(avg ? staged * (1.0 / world) : staged);
  };
}

}  // namespace

std::shared_ptr<ProcessGroup> ProcessGroup::init(ProcessGroupOptions options) {
  static std::mutex m;
  static std::shared_ptr<ProcessGroup> world;
  std::lock_guard lock(m);
  if (world) {
    world->set_timeout(options.timeout_s);
    return world;
  }
  HG_CHECK(options.timeout_s > 0, "distributed", "the timeout must be positive, got {} s", options.timeout_s);
  world = std::shared_ptr<ProcessGroup>(new ProcessGroup(options, make_backend(options)));
  return world;
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options, std::unique_ptr<detail::Backend> backend)
    : options_(options), backend_(std::move(backend)) {
  rank_ = backend_->rank();
  world_size_ = backend_->world_size();
  thread_multiple_ = backend_->thread_multiple();
}

ProcessGroup::~ProcessGroup() = default;

namespace detail {
namespace {
std::atomic<const NcclFactory*> installed_nccl{nullptr};
}
void set_nccl_factory(const NcclFactory* factory) { installed_nccl = factory; }
const NcclFactory* nccl_factory() { return installed_nccl.load(); }
}  // namespace detail

detail::Backend& ProcessGroup::backend_for(const char* op, const Tensor& t) {
  if (t.device().is_cpu()) return *backend_;
  HG_CHECK(t.device().is_cuda(), "distributed", "{}: collectives take CPU or CUDA tensors, got one on {}", op,
           t.device());
  std::lock_guard lock(cuda_mutex_);
  if (!cuda_backend_) {
    HG_CHECK(cuda::is_available(), "distributed", "{}: a CUDA tensor, but no usable CUDA backend", op);
    const detail::NcclFactory* nccl = detail::nccl_factory();
    HG_CHECK(nccl, "distributed",
             "{}: collectives on CUDA tensors need NCCL, and this build's CUDA backend has none (install NCCL next "
             "to the CUDA toolkit and rebuild)",
             op);
    // Rank 0's unique id reaches the others through the CPU backend.
    std::vector<char> id = rank_ == 0 ? nccl->unique_id() : std::vector<char>(nccl->id_bytes);
    Tensor carrier = zeros({static_cast<int64_t>((id.size() + 3) / 4)}, TensorOptions(kFloat32));
    std::memcpy(carrier.raw_data(), id.data(), id.size());
    start(backend_->broadcast(carrier, 0), "broadcast of the NCCL unique id").wait();
    std::memcpy(id.data(), carrier.raw_data(), id.size());
    cuda_backend_ = nccl->make(rank_, world_size_, id, t.device().index);
    cuda_device_ = t.device().index;
  }
  HG_CHECK(t.device().index == cuda_device_, "distributed",
           "{}: this group's NCCL communicator is on cuda:{}, got a tensor on {} (one device per process)", op,
           cuda_device_, t.device());
  return *cuda_backend_;
}

const char* ProcessGroup::backend() const { return backend_->name(); }

void ProcessGroup::set_timeout(double seconds) {
  HG_CHECK(seconds > 0, "distributed", "the timeout must be positive, got {} s", seconds);
  options_.timeout_s = seconds;
  backend_->set_timeout(seconds);  // the NCCL backend needs none: start() gives each Work the timeout
}

Work ProcessGroup::start(std::shared_ptr<Work::Impl> impl, std::string what) {
  impl->what = std::move(what);
  impl->rank = rank_;
  impl->timeout_s = options_.timeout_s;
  return Work(std::move(impl));
}

Work ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op, Accumulate accumulate) {
  check_tensor("all_reduce", tensor);
  Tensor buf = accumulate == Accumulate::Native ? tensor : staging(tensor);
  auto w = backend_for("all_reduce", tensor).all_reduce(buf, buffer_op(op));
  w->keep_alive[0] = buf;
  w->keep_alive[1] = tensor;
  w->finish = finish_into(buf, tensor, op == ReduceOp::Avg && world_size_ > 1, world_size_);
  return start(std::move(w), describe("all_reduce", tensor));
}

Work ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_tensor("broadcast", tensor);
  HG_CHECK(root >= 0 && root < world_size_, "distributed", "broadcast: root {} is not a rank of a group of {}", root,
           world_size_);
  // Bytes: a broadcast moves values unchanged, so 16-bit tensors need no float32 staging.
  auto w = backend_for("broadcast", tensor).broadcast(tensor, root);
  w->keep_alive[0] = tensor;
  return start(std::move(w), describe("broadcast", tensor));
}

Work ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_tensor("all_gather", input);
  check_tensor("all_gather", output);
  HG_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * world_size_ && output.dim() >= 1 &&
               output.size(0) == world_size_,
           "distributed", "all_gather: output [{}] {} must be [{}, {}] {} for input [{}] in a group of {}",
           fmt::join(output.shape(), ", "), dtype_name(output.dtype()), world_size_, fmt::join(input.shape(), ", "),
           dtype_name(input.dtype()), fmt::join(input.shape(), ", "), world_size_);
  check_same_device("all_gather", output, input);
  auto w = backend_for("all_gather", input).all_gather(output, input);
  w->keep_alive[0] = input;
  w->keep_alive[1] = output;
  return start(std::move(w), describe("all_gather", input));
}

Work ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("reduce_scatter", input);
  check_tensor("reduce_scatter", output);
  HG_CHECK(output.dtype() == input.dtype() && input.numel() == output.numel() * world_size_, "distributed",
           "reduce_scatter: input [{}] {} must hold {} times output [{}] {}", fmt::join(input.shape(), ", "),
           dtype_name(input.dtype()), world_size_, fmt::join(output.shape(), ", "), dtype_name(output.dtype()));
  check_same_device("reduce_scatter", output, input);
  Tensor in = staging(input);
  Tensor out = staging(output);
  auto w = backend_for("reduce_scatter", input).reduce_scatter(out, in, buffer_op(op));
  w->keep_alive[0] = in;
  w->keep_alive[1] = out;
  w->finish = finish_into(out, output, op == ReduceOp::Avg && world_size_ > 1, world_size_);
  return start(std::move(w), describe("reduce_scatter", input));
}

Work ProcessGroup::barrier() {
  capture::refuse_host_sync_any("barrier", kCollectiveInCapture);
  return start(backend_->barrier(), "barrier");
}

void ProcessGroup::abort(int code) {
  backend_->abort(code);
  std::_Exit(code);  // not reached: every backend's abort ends the process
}

}  // namespace hg::distributed
