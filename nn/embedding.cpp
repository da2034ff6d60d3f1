#include "nn/embedding.h"

#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/nn_misc.h"
#include "nn/init.h"

namespace hg::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options) : Module("Embedding") {
  HG_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding",
           "sizes must be positive, got num_embeddings {} embedding_dim {}", num_embeddings, embedding_dim);
  register_parameter("weight", weight, empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);
  if (options.padding_idx) {
    const int64_t p = *options.padding_idx;
    HG_CHECK(p >= -num_embeddings && p < num_embeddings, "Embedding",
             "padding_idx {} is out of range for {} embeddings", p, num_embeddings);
    padding_idx_ = p < 0 ? p + num_embeddings : p;
    NoGradGuard no_grad;
    weight.select(0, *padding_idx_).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  Tensor out = embedding(weight, indices);
  if (!padding_idx_) return out;
  // The padding rows read through a detached weight: the same values, and no gradient reaches
  // the padding row (as PyTorch's embedding_backward skips padding_idx).
  const Tensor pad =
      full({}, static_cast<double>(*padding_idx_), TensorOptions(indices.dtype()).device(indices.device()));
  return where(ne(indices, pad).unsqueeze(-1), out, embedding(weight.detach(), indices));
}

std::string Embedding::extra_repr() const {
  std::string out = fmt::format("{}, {}", weight.size(0), weight.size(1));
  if (padding_idx_) out += fmt::format(", padding_idx={}", *padding_idx_);
  return out;
}

}  // namespace hg::nn
