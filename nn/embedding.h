// Embedding: a lookup table of rows, trained like any parameter.
#pragma once

#include <optional>

#include "nn/module.h"

namespace hg::nn {

struct EmbeddingOptions {
  // As PyTorch's: this row starts at zero and gets no gradient (a padding token's vector).
  // Negative counts from the end.
  std::optional<int64_t> padding_idx = std::nullopt;
};

// weight [num_embeddings, embedding_dim] ~ N(0, 1) as PyTorch; forward(indices) gathers rows.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  Tensor weight;

 private:
  std::optional<int64_t> padding_idx_;
};

}  // namespace hg::nn
