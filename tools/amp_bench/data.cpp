// Synthetic and MNIST batches.
#include "data.h"

#include <cmath>
#include <filesystem>

#include "portable_random.h"

namespace amp_bench {

std::vector<Batch> synthetic_batches(const ModelInfo& model, int64_t batch, uint64_t seed) {
  int64_t per_sample = 1;
  for (int64_t d : model.sample_shape) per_sample *= d;
  hg::Shape shape{batch};
  shape.insert(shape.end(), model.sample_shape.begin(), model.sample_shape.end());
  std::vector<Batch> out;
  for (int64_t j = 0; j < kBatchesPerCell; ++j) {
    const StreamUniform ux(seed, 2 * j), uy(seed, 2 * j + 1);
    std::vector<float> x(static_cast<size_t>(batch * per_sample));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(2.0 * ux(i) - 1.0);
    std::vector<int64_t> y(static_cast<size_t>(batch));
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = static_cast<int64_t>(std::floor(uy(i) * static_cast<double>(model.classes)));
    out.push_back({hg::tensor(x, shape), hg::tensor(y, {batch})});
  }
  return out;
}

std::vector<Batch> mnist_batches(const std::string& dir, int64_t batch) {
  namespace fs = std::filesystem;
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"})
    if (!fs::exists(fs::path(dir) / f))
      throw hg::Error(
          fmt::format("[amp_bench] --real-data: {} is missing; fetch MNIST with "
                      "`bash tools/fetch-mnist.sh {}` or point --data at it",
                      (fs::path(dir) / f).string(), dir));
  const auto train = hg::data::mnist(dir, hg::data::Split::Train);
  HG_CHECK(train.size() >= kBatchesPerCell * batch, "amp_bench", "--real-data: {} holds {} images, fewer than {} x {}",
           dir, train.size(), kBatchesPerCell, batch);
  std::vector<Batch> out;
  for (int64_t j = 0; j < kBatchesPerCell; ++j)
    out.push_back(
        {train[0].narrow(0, j * batch, batch).contiguous(), train[1].narrow(0, j * batch, batch).contiguous()});
  return out;
}

}  // namespace amp_bench
