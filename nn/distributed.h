// nn::DistributedDataParallel: data-parallel training over a distributed::ProcessGroup. Gradients
// are averaged across ranks in buckets launched during backward (docs/DISTRIBUTED.md).
//
//   auto pg = hg::distributed::ProcessGroup::init();
//   auto ddp = std::make_shared<hg::nn::DistributedDataParallel>(model, pg);
//   Tensor loss = loss_fn((*ddp)(x), y);   // forward arms the gradient reduction
//   loss.backward();                      // buckets all-reduce (avg) as their gradients arrive;
//                                         // the last one waits, so grads are averaged on return
//   ddp->wait_for_gradients();            // a no-op then; needed with find_unused_parameters
//   opt.step();
#pragma once

#include <memory>
#include <vector>

#include <optional>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace hg::nn {

struct DistributedDataParallelOptions {
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;  // PyTorch's default bucket size
  // Copies rank 0's buffers (e.g. BatchNorm running stats) to every rank before each forward.
  bool broadcast_buffers = true;
  // Parameters that get no gradient in a step are reduced as zeros when wait_for_gradients()
  // runs (which then must be called before the optimizer step); without it such a step throws.
  bool find_unused_parameters = false;
  // Gradient compression (PyTorch's bf16_compress_hook / fp16_compress_hook): float32 buckets are
  // divided by the world size, rounded to this 16-bit dtype (kBFloat16 or kFloat16), summed
  // natively in it across ranks (half the bytes of float32) and written back into the float32
  // gradients. Unset: buckets are reduced in their own dtype.
  std::optional<Dtype> reduce_dtype = std::nullopt;
};

class DistributedDataParallel : public Module {
 public:
  // Broadcasts rank 0's parameters and buffers to every rank, then registers a
  // post-accumulate-grad hook on each parameter that requires grad.
  DistributedDataParallel(std::shared_ptr<Module> module, std::shared_ptr<distributed::ProcessGroup> group,
                          DistributedDataParallelOptions options = {});
  ~DistributedDataParallel() override;

  // Runs the wrapped module; outside no_sync() it arms the reduction for the next backward.
  Tensor forward(const Tensor& input) override;
  // Completes the armed reduction: launches what is left (unused parameters, with
  // find_unused_parameters), waits for every bucket and writes the averaged gradients back.
  // Throws naming the parameters without gradients when find_unused_parameters is off.
  void wait_for_gradients();

  // While a guard lives, forward does not arm the reduction: backward only accumulates local
  // gradients (gradient accumulation); the first forward after it reduces the sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(&ddp), prev_(ddp.no_sync_) { ddp.no_sync_ = true; }
    ~NoSyncGuard() {
      if (ddp_) ddp_->no_sync_ = prev_;
    }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  const std::shared_ptr<Module>& module() const { return module_; }
  const std::shared_ptr<distributed::ProcessGroup>& process_group() const { return group_; }
  // Parameter indices (into module()->parameters()) of each bucket, in launch order.
  std::vector<std::vector<int64_t>> bucket_indices() const;

 private:
  struct Bucket {
    std::vector<int64_t> params;
    Dtype dtype = kFloat32;
    int64_t pending = 0;
    bool launched = false;
    Tensor flat;
    distributed::Work work;
  };
  void arm();
  void on_grad_ready(int64_t index);
  void launch_ready();
  void launch(Bucket& bucket);
  void finish();

  std::shared_ptr<Module> module_;
  std::shared_ptr<distributed::ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  TensorList params_;
  std::vector<int64_t> bucket_of_;
  std::vector<bool> seen_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  bool no_sync_ = false;
  std::vector<RemovableHandle> hooks_;
};

}  // namespace hg::nn
