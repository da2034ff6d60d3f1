// DataLoader: batches of a TensorDataset, optionally shuffled with a seed, in a fixed order
// per epoch so a resumed run sees the same batches as an uninterrupted one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/data/dataset.h"

namespace hg::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;  // the order of epoch e depends only on (seed, e)
  bool drop_last = false;
};

class DataLoader {
 public:
  // The dataset's tensors must live on the CPU; batches are fresh contiguous copies.
  DataLoader(TensorDataset dataset, DataLoaderOptions options);

  // Batches per epoch (the last partial batch counts unless drop_last).
  int64_t size() const;
  const TensorDataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  // The epoch whose order the next begin() uses; begin() then moves on to the next epoch.
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // The sample order of an epoch (0..N-1, permuted when shuffling).
  std::vector<int64_t> order(int64_t epoch) const;
  // Batch `index` of the given sample order: one tensor per dataset tensor.
  TensorList batch(const std::vector<int64_t>& order, int64_t index) const;

  class Iterator {
   public:
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order, int64_t index)
        : loader_(loader), order_(std::move(order)), index_(index) {}
    TensorList operator*() const { return loader_->batch(*order_, index_); }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    const DataLoader* loader_;
    std::shared_ptr<const std::vector<int64_t>> order_;
    int64_t index_;
  };
  // for (TensorList batch : loader) { ... } walks one epoch.
  Iterator begin();
  Iterator end() const { return Iterator(this, nullptr, size()); }

 private:
  TensorDataset dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace hg::data
