#include "framework/data/dataloader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "framework/ops/creation.h"

namespace hg::data {

DataLoader::DataLoader(TensorDataset dataset, DataLoaderOptions options) : options_(options) {
  HG_CHECK(options.batch_size > 0, "DataLoader", "batch_size must be positive, got {}", options.batch_size);
  TensorList tensors;
  for (const Tensor& t : dataset.tensors()) {
    HG_CHECK(t.device().is_cpu(), "DataLoader", "dataset tensors must be on the CPU, got one on {}", t.device());
    tensors.push_back(t.detach().contiguous());
  }
  dataset_ = tensors.empty() ? TensorDataset() : TensorDataset(std::move(tensors));
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_.size();
  const int64_t full = n / options_.batch_size;  // no n + batch_size - 1: that overflows for huge batches
  return options_.drop_last || n % options_.batch_size == 0 ? full : full + 1;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  std::vector<int64_t> idx(static_cast<size_t>(dataset_.size()));
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (!options_.shuffle) return idx;
  // Fisher-Yates with our own index draws, so the order is the same with every standard library.
  std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  for (size_t i = idx.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(idx[i - 1], idx[j]);
  }
  return idx;
}

TensorList DataLoader::batch(const std::vector<int64_t>& order, int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "DataLoader", "batch index {} out of range [0, {})", index, size());
  const int64_t start = index * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, dataset_.size() - start);
  TensorList out;
  for (const Tensor& t : dataset_.tensors()) {
    Shape shape = t.shape();
    shape[0] = count;
    Tensor b = empty(shape, t.dtype());
    const size_t row = static_cast<size_t>(t.numel() / t.size(0)) * element_size(t.dtype());
    const auto* src = static_cast<const char*>(t.raw_data());
    auto* dst = static_cast<char*>(b.raw_data());
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(dst + static_cast<size_t>(i) * row, src + static_cast<size_t>(order[start + i]) * row, row);
    out.push_back(std::move(b));
  }
  return out;
}

DataLoader::Iterator DataLoader::begin() {
  auto ord = std::make_shared<const std::vector<int64_t>>(order(epoch_));
  ++epoch_;
  return Iterator(this, std::move(ord), 0);
}

}  // namespace hg::data
