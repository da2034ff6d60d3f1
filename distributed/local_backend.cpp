// The group of one that needs no library: what ProcessGroup::init gives a process started
// without a launcher in a build without MPI and Gloo (a GPU image, say). Every collective over
// one rank is the identity (all_gather and reduce_scatter copy), complete when it returns.
#include <cstdlib>

#include "distributed/backend.h"
#include "framework/grad_mode.h"

namespace hg::distributed::detail {

namespace {

struct DoneWork : Work::Impl {
  bool test() override { return true; }
  bool wait_until(Clock::time_point) override { return true; }
};

class LocalBackend final : public Backend {
 public:
  const char* name() const override { return "local"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  bool thread_multiple() const override { return true; }
  void set_timeout(double) override {}
  std::shared_ptr<Work::Impl> all_reduce(const Tensor&, BufferOp) override { return std::make_shared<DoneWork>(); }
  std::shared_ptr<Work::Impl> broadcast(const Tensor&, int) override { return std::make_shared<DoneWork>(); }
  std::shared_ptr<Work::Impl> all_gather(const Tensor& output, const Tensor& input) override {
    return copy(output, input);
  }
  std::shared_ptr<Work::Impl> reduce_scatter(const Tensor& output, const Tensor& input, BufferOp) override {
    return copy(output, input);
  }
  std::shared_ptr<Work::Impl> barrier() override { return std::make_shared<DoneWork>(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  static std::shared_ptr<Work::Impl> copy(const Tensor& output, const Tensor& input) {
    NoGradGuard no_grad;
    Tensor(output).copy_(input.reshape(output.shape()));
    return std::make_shared<DoneWork>();
  }
};

}  // namespace

std::unique_ptr<Backend> make_local_backend() { return std::make_unique<LocalBackend>(); }

}  // namespace hg::distributed::detail
