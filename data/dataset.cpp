#include "data/dataset.h"

#include <cstring>

#include "framework/ops/creation.h"

namespace hg::data {

namespace {

// Copies `row` bytes per index from rows of `src` (contiguous, CPU) into consecutive rows of dst.
void gather_rows(const Tensor& src, const std::vector<int64_t>& indices, Tensor& dst) {
  if (indices.empty()) return;
  const size_t row = static_cast<size_t>(src.numel() / src.size(0)) * element_size(src.dtype());
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(dst.raw_data());
  for (size_t i = 0; i < indices.size(); ++i)
    std::memcpy(to + i * row, from + static_cast<size_t>(indices[i]) * row, row);
}

}  // namespace

TensorList Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Sample> samples;
  samples.reserve(indices.size());
  for (int64_t i : indices) samples.push_back(get(i));
  return default_collate(samples);
}

TensorList default_collate(const std::vector<Sample>& samples) {
  HG_CHECK(!samples.empty(), "collate", "no samples to collate");
  const Sample& first = samples[0];
  HG_CHECK(!first.empty(), "collate", "sample 0 has no fields");
  TensorList batch;
  batch.reserve(first.size());
  for (size_t f = 0; f < first.size(); ++f) {
    const Tensor& t0 = first[f];
    HG_CHECK(t0.defined(), "collate", "sample 0 field {} is undefined", f);
    Shape shape = t0.shape();
    shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
    Tensor out = empty(shape, t0.dtype());
    const size_t bytes = static_cast<size_t>(t0.numel()) * element_size(t0.dtype());
    auto* dst = static_cast<char*>(out.raw_data());
    for (size_t s = 0; s < samples.size(); ++s) {
      HG_CHECK(samples[s].size() == first.size(), "collate", "sample {} has {} fields but sample 0 has {}", s,
               samples[s].size(), first.size());
      const Tensor& t = samples[s][f];
      HG_CHECK(t.defined() && t.shape() == t0.shape() && t.dtype() == t0.dtype(), "collate",
               "sample {} field {} is {} {} but sample 0's is {} {}", s, f, t.defined() ? t.dtype() : t0.dtype(),
               t.defined() ? t.shape() : Shape{}, t0.dtype(), t0.shape());
      HG_CHECK(t.device().is_cpu(), "collate", "sample {} field {} is on {}; samples must be CPU tensors", s, f,
               t.device());
      const Tensor c = t.contiguous();
      if (bytes) std::memcpy(dst + s * bytes, c.raw_data(), bytes);
    }
    batch.push_back(std::move(out));
  }
  return batch;
}

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

Sample TensorDataset::get(int64_t index) const {
  HG_CHECK(index >= 0 && index < size(), "TensorDataset", "index {} out of range for {} samples", index, size());
  Sample out;
  out.reserve(tensors_.size());
  for (const Tensor& t : tensors_) {
    if (t.device().is_cpu() && t.is_contiguous()) {
      Tensor row = empty(Shape(t.shape().begin() + 1, t.shape().end()), t.dtype());
      gather_rows(t, {index}, row);
      out.push_back(std::move(row));
    } else {
      out.push_back(t.select(0, index).contiguous());
    }
  }
  return out;
}

TensorList TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (const Tensor& t : tensors_)
    if (!t.device().is_cpu() || !t.is_contiguous()) return Dataset::get_batch(indices);
  for (int64_t i : indices)
    HG_CHECK(i >= 0 && i < size(), "TensorDataset", "index {} out of range for {} samples", i, size());
  TensorList out;
  out.reserve(tensors_.size());
  for (const Tensor& t : tensors_) {
    Shape shape = t.shape();
    shape[0] = static_cast<int64_t>(indices.size());
    Tensor b = empty(shape, t.dtype());
    gather_rows(t, indices, b);
    out.push_back(std::move(b));
  }
  return out;
}

MapDataset::MapDataset(std::shared_ptr<const Dataset> base, Transform transform)
    : base_(std::move(base)), transform_(std::move(transform)) {
  HG_CHECK(base_ != nullptr, "map", "no dataset to transform");
  HG_CHECK(static_cast<bool>(transform_), "map", "the transform is empty");
}

std::shared_ptr<Dataset> map(std::shared_ptr<const Dataset> base, Transform transform) {
  return std::make_shared<MapDataset>(std::move(base), std::move(transform));
}

}  // namespace hg::data
