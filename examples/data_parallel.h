// --distributed in the examples: the process group (mpirun's ranks, or torchrun-style RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), DDP around the model, and this rank's part of each
// global batch. Without --distributed every member is the single-process answer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "data/distributed_sampler.h"
#include "distributed/process_group.h"
#include "nn/distributed.h"

namespace examples {

class DataParallel {
 public:
  // Joins the group when enabled; the global batch must split evenly over the ranks.
  // reduce_dtype: "off", or "bf16"/"fp16" for DDP's gradient compression.
  DataParallel(bool enabled, const char* example, int64_t global_batch, const hg::Device& device,
               const std::string& reduce_dtype = "off") {
    if (reduce_dtype != "off") options_.reduce_dtype = reduce_dtype == "bf16" ? hg::kBFloat16 : hg::kFloat16;
    if (!enabled) return;
    group_ = hg::distributed::ProcessGroup::init();
    rank_ = group_->rank();
    world_ = group_->world_size();
    HG_CHECK(global_batch % world_ == 0, example, "--batch-size {} does not split evenly over {} ranks", global_batch,
             world_);
    HG_CHECK(device.is_cpu(), example, "--distributed runs on the CPU (MPI or Gloo); add --device cpu");
  }

  bool enabled() const { return group_ != nullptr; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool is_main() const { return rank_ == 0; }  // writes checkpoints and prints the summary
  int64_t local_batch(int64_t global_batch) const { return global_batch / world_; }

  // What the training loop calls: DDP around model (rank 0's weights broadcast to every rank,
  // gradients averaged during backward), or model itself.
  std::shared_ptr<hg::nn::Module> wrap(std::shared_ptr<hg::nn::Module> model) {
    if (!group_) return model;
    ddp_ = std::make_shared<hg::nn::DistributedDataParallel>(std::move(model), group_, options_);
    return ddp_;
  }

  // After backward: the gradients are averaged by then; this checks that every bucket was reduced.
  void wait_for_gradients() {
    if (ddp_) ddp_->wait_for_gradients();
  }

  // Gradient accumulation: forwards while `guard` lives do not arm DDP's reduction, so their
  // backwards only accumulate; the micro-batch after it reduces the sum. Nothing without DDP.
  void no_sync(std::optional<hg::nn::DistributedDataParallel::NoSyncGuard>& guard) {
    if (ddp_) guard.emplace(*ddp_);
  }

  // The mean of `value` over the ranks (a logged loss); `value` itself without DDP.
  double mean(double value) {
    if (!group_) return value;
    const hg::Tensor t = hg::tensor(std::vector<double>{value});
    group_->all_reduce(t, hg::distributed::ReduceOp::Avg).wait();
    return t.item<double>();
  }

  // MNIST-style: the loader for one epoch, over the whole set or (distributed) over this rank's
  // shard of a per-epoch shuffle, local_batch samples a step.
  hg::data::DataLoader loader(const hg::data::TensorDataset& train, int64_t epoch,
                              hg::data::DataLoaderOptions options) {
    if (!group_) return hg::data::DataLoader(train, options);
    hg::data::DistributedSampler sampler(train.size(), world_, rank_, {.shuffle = true, .seed = options.seed});
    const hg::Tensor index = hg::tensor<int64_t>(sampler.indices(epoch));
    hg::TensorList shard;
    for (const hg::Tensor& t : train.tensors()) shard.push_back(hg::index_select(t, 0, index));
    options.batch_size = local_batch(options.batch_size);
    options.shuffle = false;  // the sampler shuffled
    return hg::data::DataLoader(hg::data::TensorDataset(shard), options);
  }

 private:
  std::shared_ptr<hg::distributed::ProcessGroup> group_;
  std::shared_ptr<hg::nn::DistributedDataParallel> ddp_;
  hg::nn::DistributedDataParallelOptions options_;
  int rank_ = 0;
  int world_ = 1;
};

}  // namespace examples
