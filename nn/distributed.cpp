// DistributedDataParallel's reducer: gradient buckets all-reduced in a fixed order during backward.
#include "nn/distributed.h"

#include <string>

#include "framework/error.h"
#include "framework/grad_mode.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"

namespace hg::nn {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module,
                                                 std::shared_ptr<distributed::ProcessGroup> group,
                                                 DistributedDataParallelOptions options)
    : Module("DistributedDataParallel"), module_(std::move(module)), group_(std::move(group)), options_(options) {
  HG_CHECK(module_ != nullptr, "DistributedDataParallel", "the module is null");
  HG_CHECK(group_ != nullptr, "DistributedDataParallel", "the process group is null");
  HG_CHECK(options_.bucket_cap_bytes > 0, "DistributedDataParallel", "bucket_cap_bytes must be positive, got {}",
           options_.bucket_cap_bytes);
  HG_CHECK(!options_.reduce_dtype || is_reduced_float(*options_.reduce_dtype), "DistributedDataParallel",
           "reduce_dtype must be bfloat16 or float16 (gradient compression), got {}",
           options_.reduce_dtype ? dtype_name(*options_.reduce_dtype) : "");
  register_module("module", module_);
  {
    NoGradGuard no_grad;
    std::vector<distributed::Work> works;
    for (const Tensor& p : module_->parameters()) works.push_back(group_->broadcast(p, 0));
    for (const Tensor& b : module_->buffers())
      if (b.is_floating_point()) works.push_back(group_->broadcast(b, 0));
    for (auto& w : works) w.wait();
  }
  for (const Tensor& p : module_->parameters()) {
    if (!p.requires_grad()) continue;
    HG_CHECK(p.is_contiguous(), "DistributedDataParallel", "parameters must be contiguous, got one of shape [{}]",
             fmt::join(p.shape(), ", "));
    // One device per replica: CPU parameters go through MPI or Gloo, CUDA ones through NCCL.
    HG_CHECK(params_.empty() || p.device() == params_.front().device(), "DistributedDataParallel",
             "all parameters must be on one device, got {} and {}", params_.front().device(), p.device());
    params_.push_back(p);
  }
  // Buckets in reverse parameter order (as PyTorch): backward produces the last layers'
  // gradients first, so the first bucket fills first. One dtype per bucket.
  bucket_of_.assign(params_.size(), -1);
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    const Tensor& p = params_[i];
    int64_t bytes = p.numel() * static_cast<int64_t>(element_size(p.dtype()));
    bool new_bucket = buckets_.empty() || buckets_.back().dtype != p.dtype();
    if (!new_bucket) {
      int64_t used = 0;
      for (int64_t j : buckets_.back().params) used += params_[j].numel() * element_size(params_[j].dtype());
      new_bucket = used + bytes > options_.bucket_cap_bytes;
    }
    if (new_bucket) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype();
    }
    buckets_.back().params.push_back(i);
    bucket_of_[i] = static_cast<int64_t>(buckets_.size()) - 1;
  }
  seen_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].register_post_accumulate_grad_hook(
        [this, i](const Tensor&) { on_grad_ready(static_cast<int64_t>(i)); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (auto& h : hooks_) h.remove();
}

std::vector<std::vector<int64_t>> DistributedDataParallel::bucket_indices() const {
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (options_.broadcast_buffers && group_->world_size() > 1) {
    NoGradGuard no_grad;
    for (const Tensor& b : module_->buffers())
      if (b.is_floating_point()) group_->broadcast(b, 0).wait();
  }
  if (!no_sync_) arm();
  return (*module_)(input);
}

void DistributedDataParallel::arm() {
  if (armed_) {
    // A previous forward's reduction that never ran (no backward): start over. One that was
    // launched but not finished is completed first, so no collective is left dangling.
    bool any_launched = false;
    for (auto& b : buckets_) any_launched = any_launched || b.launched;
    if (any_launched) wait_for_gradients();
  }
  for (auto& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
    b.flat = Tensor();
  }
  seen_.assign(params_.size(), false);
  next_launch_ = 0;
  armed_ = true;
}

void DistributedDataParallel::on_grad_ready(int64_t index) {
  if (!armed_ || seen_[index]) return;
  seen_[index] = true;
  --buckets_[bucket_of_[index]].pending;
  launch_ready();
  // The last bucket went out: wait here, at the end of backward, so the averaged gradients are
  // in .grad when backward() returns (PyTorch waits in a callback queued on its engine).
  if (next_launch_ == buckets_.size()) finish();
}

void DistributedDataParallel::launch_ready() {
  // Every rank launches buckets in the same order (MPI matches collectives by order), however
  // its backward happened to order the gradients.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void DistributedDataParallel::launch(Bucket& bucket) {
  NoGradGuard no_grad;
  TensorList pieces;
  for (int64_t i : bucket.params) {
    const Tensor& g = params_[i].grad();
    pieces.push_back(g.defined()
                         ? g.reshape({-1})
                         : zeros({params_[i].numel()}, TensorOptions(params_[i].dtype()).device(params_[i].device())));
  }
  bucket.flat = pieces.size() == 1 ? pieces[0].contiguous().clone() : cat(pieces, 0);
  if (options_.reduce_dtype && bucket.dtype == kFloat32) {
    // Divided first, so a float16 sum of large gradients does not overflow on the way.
    bucket.flat = (bucket.flat * (1.0 / group_->world_size())).to(*options_.reduce_dtype);
    bucket.work = group_->all_reduce(bucket.flat, distributed::ReduceOp::Sum, distributed::Accumulate::Native);
  } else {
    bucket.work = group_->all_reduce(bucket.flat, distributed::ReduceOp::Avg);
  }
  bucket.launched = true;
}

void DistributedDataParallel::wait_for_gradients() {
  if (!armed_) return;
  if (next_launch_ < buckets_.size()) {
    if (options_.find_unused_parameters) {
      for (size_t i = 0; i < params_.size(); ++i)
        if (!seen_[i]) {
          seen_[i] = true;
          --buckets_[bucket_of_[i]].pending;
        }
      launch_ready();
    } else {
      auto named = named_parameters();  // "module." + the wrapped module's names
      std::vector<std::string> missing;
      for (size_t i = 0; i < params_.size(); ++i)
        if (!seen_[i]) {
          for (const auto& [name, t] : named)
            if (t.is_same(params_[i])) missing.push_back(name);
        }
      armed_ = false;
      for (auto& b : buckets_)
        if (b.launched) b.work.wait();
      fail("DistributedDataParallel",
           "these parameters got no gradient in this step: {}; construct with find_unused_parameters = true if that "
           "is intended, or make every parameter take part in the loss",
           fmt::join(missing, ", "));
    }
  }
  finish();
}

void DistributedDataParallel::finish() {
  NoGradGuard no_grad;
  armed_ = false;
  for (auto& b : buckets_) {
    b.work.wait();
    int64_t offset = 0;
    for (int64_t i : b.params) {
      const Tensor& p = params_[i];
      Tensor avg = b.flat.narrow(0, offset, p.numel()).view(p.shape());
      offset += p.numel();
      if (Tensor g = p.grad(); g.defined())
        g.copy_(avg);  // converts from reduce_dtype
      else
        p.set_grad(avg.to(p.dtype()).clone());
    }
    b.flat = Tensor();
    b.launched = false;
  }
}

}  // namespace hg::nn
