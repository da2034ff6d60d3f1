// DistributedSampler: a seeded permutation, padded (or cut) to a multiple of the world size, strided by rank.
#include "data/distributed_sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "framework/error.h"

namespace hg::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank,
                                       DistributedSamplerOptions options)
    : size_(dataset_size), world_(world_size), rank_(rank), options_(options) {
  HG_CHECK(world_size >= 1, "DistributedSampler", "world_size must be >= 1, got {}", world_size);
  HG_CHECK(rank >= 0 && rank < world_size, "DistributedSampler", "rank {} is not in [0, {})", rank, world_size);
  HG_CHECK(dataset_size >= 0, "DistributedSampler", "the dataset size must be >= 0, got {}", dataset_size);
  num_samples_ = options_.drop_last ? size_ / world_ : (size_ + world_ - 1) / world_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  const int64_t total = num_samples_ * world_;
  // Pad by repeating from the start (every rank then takes the same number of steps).
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total && size_ > 0; ++i) order.push_back(order[i % size_]);
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(order[i]);
  return mine;
}

}  // namespace hg::data
