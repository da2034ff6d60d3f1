// Embedding: a lookup table of rows, trained like any parameter.
#pragma once

#include "nn/module.h"

namespace hg::nn {

// weight [num_embeddings, embedding_dim] ~ N(0, 1) as PyTorch; forward(indices) gathers rows.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override { return fmt::format("{}, {}", weight.size(0), weight.size(1)); }
  Tensor weight;
};

}  // namespace hg::nn
