// Transforms of samples: Compose chains them, Lambda applies a tensor function to one field,
// Normalize standardises a field per channel. data::map(dataset, transform) applies one.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

// Applies its transforms in order.
class Compose {
 public:
  Compose(std::initializer_list<Transform> transforms) : Compose(std::vector<Transform>(transforms)) {}
  explicit Compose(std::vector<Transform> transforms);
  Sample operator()(Sample sample) const;

 private:
  std::vector<Transform> transforms_;
};

// Replaces field `field` of a sample by fn(field); the other fields pass through.
class Lambda {
 public:
  Lambda(std::function<Tensor(const Tensor&)> fn, size_t field = 0);
  Sample operator()(Sample sample) const;

 private:
  std::function<Tensor(const Tensor&)> fn_;
  size_t field_;
};

// (x - mean[c]) / std[c] for channel c = index along dim 0 of field `field` ([C, ...]); one mean
// and std apply to every element. Floating inputs keep their dtype, integer ones become float32.
class Normalize {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std, size_t field = 0);
  Sample operator()(Sample sample) const;

 private:
  std::vector<double> mean_, std_;
  size_t field_;
};

}  // namespace hg::data
