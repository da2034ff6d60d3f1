#include "data/dataloader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "framework/cuda.h"
#include "framework/type_name.h"

namespace hg::data {

namespace {

// Whether batches get pinned: asked for, and a CUDA device to copy them to exists. Otherwise the
// option is ignored with one warning per process (PyTorch does the same).
bool pinning(bool asked) {
  if (!asked) return false;
  if (cuda::is_available()) return true;
  static std::once_flag warned;
  std::call_once(warned, [] {
    fmt::print(stderr,
               "halfgrad warning: DataLoader pin_memory was asked for, but no CUDA device is available; it is "
               "ignored (this warning is shown once)\n");
  });
  return false;
}

// Batch `index` of `order`: the samples' get_batch (or get + the user's collate), then pinned.
TensorList fetch(const Dataset& dataset, const DataLoaderOptions& o, bool pin, const std::vector<int64_t>& order,
                 int64_t index) {
  const auto start = static_cast<size_t>(index * o.batch_size);
  const size_t count = std::min(static_cast<size_t>(o.batch_size), order.size() - start);
  const std::vector<int64_t> indices(order.begin() + static_cast<std::ptrdiff_t>(start),
                                     order.begin() + static_cast<std::ptrdiff_t>(start + count));
  TensorList batch;
  if (o.collate) {
    std::vector<Sample> samples;
    samples.reserve(indices.size());
    for (int64_t i : indices) samples.push_back(dataset.get(i));
    batch = o.collate(samples);
  } else {
    batch = dataset.get_batch(indices);
  }
  if (pin)
    for (Tensor& t : batch)
      if (t.defined() && t.device().is_cpu()) t = cuda::pin_memory(t);
  return batch;
}

// What an exception says, with its type when it is not an hg::Error (whose message names its op).
std::string describe(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e) != nullptr) return e.what();
  return fmt::format("{}: {}", type_name(e), e.what());
}

// After a batch failed as a whole: the first of its samples that fails alone (or -1), so the
// error can name it as PyTorch's worker errors do. Only runs on the failure path.
int64_t failing_sample(const Dataset& dataset, const std::vector<int64_t>& order, size_t start, size_t count) {
  for (size_t i = start; i < start + count; ++i) {
    try {
      (void)dataset.get(order[i]);
    } catch (...) {
      return order[i];
    }
  }
  return -1;
}

// Runs fetch, turning what it throws into "[DataLoader] sample S (batch B of epoch E): <type>:
// <what>", the original nested (std::rethrow_if_nested gives it back with its own type).
TensorList fetch_named(const Dataset& dataset, const DataLoaderOptions& o, bool pin, const std::vector<int64_t>& order,
                       int64_t index, const std::string& where) {
  const auto start = static_cast<size_t>(index * o.batch_size);
  const size_t count = std::min(static_cast<size_t>(o.batch_size), order.size() - start);
  auto place = [&] {
    const int64_t sample = failing_sample(dataset, order, start, count);
    return sample >= 0 ? fmt::format("sample {} ({})", sample, where) : where;
  };
  try {
    return fetch(dataset, o, pin, order, index);
  } catch (const std::exception& e) {
    std::throw_with_nested(Error(fmt::format("[DataLoader] {}: {}", place(), describe(e))));
  } catch (...) {
    std::throw_with_nested(Error(fmt::format("[DataLoader] {}: an exception that is not a std::exception", place())));
  }
}

}  // namespace

// One pass over the data. Without workers it fetches each batch when the iterator asks. With
// workers, each takes the lowest batch index nobody has taken yet, as long as it is fewer than
// num_workers * prefetch_factor ahead of the consumer, and files the result (batch or exception)
// under its index; the consumer waits for its index. A batch depends only on (order, index), so
// the batches are the same with any number of workers.
class DataLoader::Epoch {
 public:
  Epoch(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options, int64_t epoch,
        std::vector<int64_t> order, int64_t batches)
      : dataset_(std::move(dataset)),
        options_(options),
        pin_(pinning(options.pin_memory)),
        epoch_(epoch),
        order_(std::move(order)),
        batches_(batches),
        capacity_(static_cast<int64_t>(options.num_workers) * options.prefetch_factor) {
    try {
      workers_.reserve(static_cast<size_t>(std::min<int64_t>(options_.num_workers, batches_)));
      for (int w = 0; w < options_.num_workers && w < batches_; ++w) workers_.emplace_back([this] { work(); });
    } catch (const std::exception& e) {  // no thread to be had: stop those started, since no destructor will run
      const size_t started = workers_.size();
      stop_workers();
      fail("DataLoader", "cannot start worker thread {} of {}: {}", started + 1, options_.num_workers, e.what());
    }
  }

  ~Epoch() { stop_workers(); }

  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  TensorList get(int64_t index) {
    if (index == current_index_) return current_;
    HG_CHECK(index >= 0 && index < batches_, "DataLoader", "batch index {} out of range [0, {})", index, batches_);
    if (workers_.empty()) {
      current_ = fetch_named(*dataset_, options_, pin_, order_, index, where(index));
      current_index_ = index;
      return current_;
    }
    Result result;
    {
      std::unique_lock lock(mutex_);
      HG_CHECK(index >= consumer_, "DataLoader",
               "batch {} was already passed: a DataLoader iterator makes a single pass", index);
      if (index > consumer_) {  // an iterator copy jumped ahead: what lies before it is not needed
        consumer_ = index;
        ready_.erase(ready_.begin(), ready_.lower_bound(consumer_));
        wake_workers_.notify_all();
      }
      ready_wait_.wait(lock, [&] { return ready_.count(index) != 0; });
      auto it = ready_.find(index);
      result = std::move(it->second);
      ready_.erase(it);
    }
    if (result.error) std::rethrow_exception(result.error);
    current_ = std::move(result.batch);
    current_index_ = index;
    return current_;
  }

  // The consumer moved past `index`: its slot frees up for a batch further ahead.
  void advance(int64_t index) {
    current_index_ = -1;
    current_.clear();
    if (workers_.empty()) return;
    {
      std::lock_guard lock(mutex_);
      consumer_ = index + 1;
      ready_.erase(ready_.begin(), ready_.lower_bound(consumer_));
    }
    wake_workers_.notify_all();
  }

 private:
  struct Result {
    TensorList batch;
    std::exception_ptr error;
  };

  void stop_workers() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_workers_.notify_all();
    for (std::thread& t : workers_) t.join();  // a worker inside get() finishes that batch first
  }

  std::string where(int64_t index) const { return fmt::format("batch {} of epoch {}", index, epoch_); }

  void work() {
    for (;;) {
      int64_t index = 0;
      {
        std::unique_lock lock(mutex_);
        // The next index to take: one the consumer skipped (++ without *) is never fetched.
        const auto next = [&] { return std::max(next_, consumer_); };
        wake_workers_.wait(lock, [&] { return stop_ || next() >= batches_ || next() < consumer_ + capacity_; });
        if (stop_ || next() >= batches_) return;
        index = next();
        next_ = index + 1;
      }
      Result result;
      try {
        result.batch = fetch_named(*dataset_, options_, pin_, order_, index, where(index));
      } catch (...) {
        result.error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        if (index >= consumer_) ready_.emplace(index, std::move(result));
      }
      ready_wait_.notify_all();
    }
  }

  const std::shared_ptr<const Dataset> dataset_;
  const DataLoaderOptions options_;
  const bool pin_;
  const int64_t epoch_;
  const std::vector<int64_t> order_;
  const int64_t batches_;
  const int64_t capacity_;
  // The consumer's side (one thread: the loop that holds the iterators).
  int64_t current_index_ = -1;
  TensorList current_;
  // Shared with the workers, guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable wake_workers_, ready_wait_;
  int64_t next_ = 0;      // lowest index no worker has taken
  int64_t consumer_ = 0;  // the consumer's batch: results below it are dropped
  std::map<int64_t, Result> ready_;
  bool stop_ = false;
  std::vector<std::thread> workers_;  // last: started after everything they use exists
};

TensorList DataLoader::Iterator::operator*() const {
  HG_CHECK(epoch_ != nullptr, "DataLoader", "dereferencing the end iterator");
  return epoch_->get(index_);
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (epoch_) epoch_->advance(index_);
  ++index_;
  return *this;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  HG_CHECK(dataset_ != nullptr, "DataLoader", "no dataset");
  HG_CHECK(options_.batch_size > 0, "DataLoader", "batch_size must be positive, got {}", options_.batch_size);
  HG_CHECK(options_.num_workers >= 0, "DataLoader", "num_workers must be >= 0, got {}", options_.num_workers);
  HG_CHECK(options_.prefetch_factor >= 1, "DataLoader", "prefetch_factor must be >= 1, got {}",
           options_.prefetch_factor);
}

namespace {
std::shared_ptr<const Dataset> cpu_copy(const TensorDataset& dataset) {
  TensorList tensors;
  for (const Tensor& t : dataset.tensors()) {
    HG_CHECK(t.device().is_cpu(), "DataLoader", "dataset tensors must be on the CPU, got one on {}", t.device());
    tensors.push_back(t.detach().contiguous());
  }
  return tensors.empty() ? std::make_shared<TensorDataset>() : std::make_shared<TensorDataset>(std::move(tensors));
}
}  // namespace

DataLoader::DataLoader(TensorDataset dataset, DataLoaderOptions options)
    : DataLoader(cpu_copy(dataset), std::move(options)) {}

namespace {
// The dataset's size, checked each time: size() is the user's virtual and may return anything.
int64_t checked_size(const Dataset& dataset) {
  const int64_t n = dataset.size();
  HG_CHECK(n >= 0, "DataLoader", "the dataset's size() returned {}; sizes must be non-negative", n);
  return n;
}
}  // namespace

int64_t DataLoader::size() const {
  const int64_t n = checked_size(*dataset_);
  const int64_t full = n / options_.batch_size;  // no n + batch_size - 1: that overflows for huge batches
  return options_.drop_last || n % options_.batch_size == 0 ? full : full + 1;
}

std::vector<int64_t> DataLoader::order(int64_t epoch) const {
  const int64_t n = checked_size(*dataset_);
  std::vector<int64_t> idx;
  try {
    idx.resize(static_cast<size_t>(n));
  } catch (const std::exception& e) {  // std::length_error or std::bad_alloc for a huge dataset
    fail("DataLoader", "cannot hold the sample order of a dataset of {} samples: {}", n, e.what());
  }
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
  const int64_t n = checked_size(*dataset_);
  HG_CHECK(static_cast<int64_t>(order.size()) == n, "DataLoader", "an order of {} samples for a dataset of {}",
           order.size(), n);
  return fetch_named(*dataset_, options_, pinning(options_.pin_memory), order, index, fmt::format("batch {}", index));
}

DataLoader::Iterator DataLoader::begin() {
  auto pass = std::make_shared<Epoch>(dataset_, options_, epoch_, order(epoch_), size());
  ++epoch_;
  return Iterator(std::move(pass), 0);
}

}  // namespace hg::data
