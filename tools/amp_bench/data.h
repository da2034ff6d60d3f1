// The batches a cell trains on: a few fixed batches cycled, synthetic (portable random, the
// same in the PyTorch script) or the first MNIST training images (--real-data).
#pragma once

#include <string>
#include <vector>

#include "models.h"

namespace amp_bench {

inline constexpr int64_t kBatchesPerCell = 4;

struct Batch {
  hg::Tensor x;  // float32 [batch, *sample_shape]
  hg::Tensor y;  // int64 [batch]
};

// Synthetic: x[i] = 2 u - 1 from stream 2 j, y[i] = floor(u * classes) from stream 2 j + 1,
// for batch j (so a model can fit them and the loss falls).
std::vector<Batch> synthetic_batches(const ModelInfo& model, int64_t batch, uint64_t seed);

// The first kBatchesPerCell * batch MNIST training images, normalised as the examples do.
// Throws hg::Error naming the directory and tools/fetch-mnist.sh when the files are missing.
std::vector<Batch> mnist_batches(const std::string& dir, int64_t batch);

}  // namespace amp_bench
