#include "nn/embedding.h"

#include "framework/ops/creation.h"
#include "framework/ops/nn_misc.h"
#include "nn/init.h"

namespace hg::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) : Module("Embedding") {
  HG_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding",
           "sizes must be positive, got num_embeddings {} embedding_dim {}", num_embeddings, embedding_dim);
  register_parameter("weight", weight, empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices); }

}  // namespace hg::nn
