// DataLoader: batches of a Dataset, optionally shuffled with a seed, in a fixed order per epoch
// so a resumed run sees the same batches as an uninterrupted one; optionally fetched ahead by
// background worker threads, which deliver the same batches, in the same order, as none.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

// Turns the samples of one batch into the batch; default_collate when empty.
using Collate = std::function<TensorList(const std::vector<Sample>&)>;

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;  // the order of epoch e depends only on (seed, e)
  bool drop_last = false;
  // Background threads that fetch and collate batches ahead of the loop (0: the loop's own thread
  // fetches each batch when it asks for it). Dataset::get and transforms then run on them.
  int num_workers = 0;
  // Batches fetched ahead per worker (at most num_workers * prefetch_factor are held at once).
  int prefetch_factor = 2;
  // Batches are copied into page-locked host memory, from which copies to a GPU run
  // asynchronously. Without a usable CUDA device it warns once and is ignored, as in PyTorch.
  bool pin_memory = false;
  // Used with Dataset::get instead of Dataset::get_batch when set; like get(), it runs on the
  // worker threads, several at once.
  Collate collate = {};
};

class DataLoader {
 public:
  // get() and get_batch() of the dataset are called from the worker threads.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  // The tensors must live on the CPU; the loader keeps contiguous copies of them.
  DataLoader(TensorDataset dataset, DataLoaderOptions options);

  // Batches per epoch (the last partial batch counts unless drop_last).
  int64_t size() const;
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  // The epoch whose order the next begin() uses; begin() then moves on to the next epoch.
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // The sample order of an epoch (0..N-1, permuted when shuffling).
  std::vector<int64_t> order(int64_t epoch) const;
  // Batch `index` of the given sample order, fetched on the calling thread.
  TensorList batch(const std::vector<int64_t>& order, int64_t index) const;

  class Epoch;  // one pass: the order, and the worker threads when there are any
  // An input iterator: each batch is fetched (or waited for) once. Copies share the pass, whose
  // workers stop (and are joined) when the last copy is destroyed, whether or not the pass ran
  // to its end; the pass keeps the dataset alive, so it may outlive the loader.
  class Iterator {
   public:
    Iterator(std::shared_ptr<Epoch> epoch, int64_t index) : epoch_(std::move(epoch)), index_(index) {}
    // The batch; an exception thrown while fetching it (by get(), a transform or the collation,
    // on whichever thread) is thrown here as hg::Error "[DataLoader] batch i of epoch e: ...",
    // with the original nested in it (std::rethrow_if_nested).
    TensorList operator*() const;
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return index_ == other.index_; }

   private:
    std::shared_ptr<Epoch> epoch_;
    int64_t index_;
  };
  // for (TensorList batch : loader) { ... } walks one epoch.
  Iterator begin();
  Iterator end() const { return Iterator(nullptr, size()); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
};

}  // namespace hg::data
