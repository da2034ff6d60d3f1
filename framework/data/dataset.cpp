#include "framework/data/dataset.h"

namespace hg::data {

TensorDataset::TensorDataset(TensorList tensors) : tensors_(std::move(tensors)) {
  HG_CHECK(!tensors_.empty(), "TensorDataset", "needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    HG_CHECK(t.defined() && t.dim() >= 1, "TensorDataset", "tensor {} must be defined with at least one dimension", i);
    HG_CHECK(t.size(0) == tensors_[0].size(0), "TensorDataset",
             "tensor {} has {} samples (shape {}) but tensor 0 has {} (shape {})", i, t.size(0), t.shape(),
             tensors_[0].size(0), tensors_[0].shape());
  }
}

}  // namespace hg::data
