// data::DistributedSampler: the sample indices one rank of a data-parallel job reads in an epoch
// (disjoint shards, the same seeded shuffle on every rank, padded to equal length).
#pragma once

#include <cstdint>
#include <vector>

namespace hg::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;       // epoch e's order depends only on (seed, e): equal on every rank
  bool drop_last = false;  // true: drop the tail instead of padding with repeated indices
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, DistributedSamplerOptions options = {});
  // Rank r gets positions r, r + world, r + 2 world, ... of the (shuffled, padded) epoch order,
  // as PyTorch's DistributedSampler.
  std::vector<int64_t> indices(int64_t epoch) const;
  int64_t num_samples() const { return num_samples_; }  // per rank, the same on every rank

 private:
  int64_t size_;
  int world_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace hg::data
