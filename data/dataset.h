// Datasets: the Dataset interface a user implements (size, get), TensorDataset (tensors that
// share their first dimension), and a dataset seen through a transform (map).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "framework/tensor.h"

namespace hg::data {

// One sample: its fields in a fixed order, e.g. {image, label}. A batch has the same fields, each
// with a leading batch dimension.
using Sample = TensorList;

// What a DataLoader reads. get() may be called from several worker threads at once (num_workers >
// 0), so it must not change shared state without its own locking; it is const for that reason.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Sample get(int64_t index) const = 0;
  // The collated batch of these samples. The default calls get() for each and stacks each field
  // (default_collate); a dataset that can gather a batch faster overrides it.
  virtual TensorList get_batch(const std::vector<int64_t>& indices) const;
};

// Stacks field j of every sample into field j of the batch ([n, ...] from n samples of [...]):
// the samples must agree on their field count and on each field's shape and dtype, and hold
// CPU tensors. Throws "[collate] ..." naming the sample and field that disagree.
TensorList default_collate(const std::vector<Sample>& samples);

class TensorDataset : public Dataset {
 public:
  TensorDataset() = default;
  // Throws when the tensors are undefined, 0-d, or disagree on their first dimension.
  explicit TensorDataset(TensorList tensors);
  TensorDataset(std::initializer_list<Tensor> tensors) : TensorDataset(TensorList(tensors)) {}

  int64_t size() const override { return tensors_.empty() ? 0 : tensors_[0].size(0); }
  // Row `index` of each tensor, as fresh tensors.
  Sample get(int64_t index) const override;
  // Copies the rows straight into the batch (no per-sample tensors) when the tensors are
  // contiguous on the CPU.
  TensorList get_batch(const std::vector<int64_t>& indices) const override;
  const TensorList& tensors() const { return tensors_; }
  const Tensor& operator[](size_t i) const {
    HG_CHECK(i < tensors_.size(), "TensorDataset", "no tensor {} (there are {})", i, tensors_.size());
    return tensors_[i];
  }

 private:
  TensorList tensors_;
};

// A transform maps a sample to a sample (transforms.h has stock ones and Compose).
using Transform = std::function<Sample(Sample)>;

// `base` seen through `transform`: get(i) is transform(base.get(i)), computed on each access (on
// the loader's worker threads when it has them). The transform must be safe to call from several
// threads at once; one that draws random numbers should derive them from the sample, not from
// hg's global generator, for batches to stay the same with any num_workers.
class MapDataset : public Dataset {
 public:
  MapDataset(std::shared_ptr<const Dataset> base, Transform transform);
  int64_t size() const override { return base_->size(); }
  Sample get(int64_t index) const override { return transform_(base_->get(index)); }

 private:
  std::shared_ptr<const Dataset> base_;
  Transform transform_;
};

std::shared_ptr<Dataset> map(std::shared_ptr<const Dataset> base, Transform transform);
inline std::shared_ptr<Dataset> map(TensorDataset base, Transform transform) {
  return map(std::make_shared<TensorDataset>(std::move(base)), std::move(transform));
}

}  // namespace hg::data
