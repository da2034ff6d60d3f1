// TensorDataset: tensors that share their first dimension (sample i is row i of each).
#pragma once

#include <initializer_list>

#include "framework/tensor.h"

namespace hg::data {

class TensorDataset {
 public:
  TensorDataset() = default;
  // Throws when the tensors are undefined, 0-d, or disagree on their first dimension.
  explicit TensorDataset(TensorList tensors);
  TensorDataset(std::initializer_list<Tensor> tensors) : TensorDataset(TensorList(tensors)) {}

  int64_t size() const { return tensors_.empty() ? 0 : tensors_[0].size(0); }
  const TensorList& tensors() const { return tensors_; }
  const Tensor& operator[](size_t i) const { return tensors_.at(i); }

 private:
  TensorList tensors_;
};

}  // namespace hg::data
