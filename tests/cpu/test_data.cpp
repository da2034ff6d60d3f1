// The IDX reader and MNIST splits on small files written here; DataLoader batching and shuffling.
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "data/distributed_sampler.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;
using hg::test::temp_dir;
namespace fs = std::filesystem;

namespace {

void write_bytes(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// An IDX file of unsigned bytes: magic 0x0000080N, big-endian dims, then data.
std::vector<unsigned char> idx(const std::vector<uint32_t>& dims, const std::vector<unsigned char>& data) {
  std::vector<unsigned char> b = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// A tiny MNIST split: n images whose pixels are all (i * 50) and labels i % 10.
void write_mnist(const fs::path& dir, const std::string& prefix, uint32_t n) {
  std::vector<unsigned char> pixels, labels;
  for (uint32_t i = 0; i < n; ++i) {
    pixels.insert(pixels.end(), 28 * 28, static_cast<unsigned char>(i * 50));
    labels.push_back(static_cast<unsigned char>(i % 10));
  }
  write_bytes(dir / (prefix + "-images-idx3-ubyte"), idx({n, 28, 28}, pixels));
  write_bytes(dir / (prefix + "-labels-idx1-ubyte"), idx({n}, labels));
}

}  // namespace

TEST_CASE("read_idx reads shape and bytes") {
  const auto dir = temp_dir("idx");
  write_bytes(dir / "a", idx({2, 3}, {1, 2, 3, 4, 5, 255}));
  Tensor t = data::read_idx((dir / "a").string());
  CHECK(t.dtype() == kUInt8);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 255});
  fs::remove_all(dir);
}

TEST_CASE("read_idx rejects bad files, naming the file and the problem") {
  const auto dir = temp_dir("idx_bad");
  auto check = [&](const std::string& name, const std::vector<unsigned char>& bytes, const std::string& what) {
    const std::string path = (dir / name).string();
    write_bytes(path, bytes);
    check_error([&] { data::read_idx(path); }, {"[read_idx]", path + ": ", what});
  };
  check("magic", {1, 2, 8, 1, 0, 0, 0, 1, 7}, "bad magic number 0x01020801");
  check("type", {0, 0, 0x0d, 1, 0, 0, 0, 1, 7}, "not unsigned byte");
  check("ndim", {0, 0, 8, 0}, "0 dimensions");
  check("short", {0, 0}, "truncated");
  check("header", {0, 0, 8, 3, 0, 0, 0, 2}, "truncated header");
  check("data", idx({2, 3}, {1, 2, 3}), "truncated: shape [2, 3] needs 6 data bytes, the file holds 3");
  check("extra", idx({2}, {1, 2, 3}), "1 unexpected bytes");
  check("zero", idx({0}, {}), "dimension 0 has size 0");
  check_error([&] { data::read_idx((dir / "nope").string()); }, {"[read_idx]", "nope", "cannot open"});
  fs::remove_all(dir);
}

TEST_CASE("mnist normalises images and checks the dims of both files") {
  const auto dir = temp_dir("mnist");
  write_mnist(dir, "train", 3);
  write_mnist(dir, "t10k", 2);
  auto train = data::mnist(dir.string(), data::Split::Train);
  auto test = data::mnist(dir.string(), data::Split::Test);
  CHECK(train.size() == 3);
  CHECK(test.size() == 2);
  CHECK(train[0].shape() == Shape{3, 1, 28, 28});
  CHECK(train[0].dtype() == kFloat32);
  CHECK(train[1].dtype() == kInt64);
  CHECK(train[1].to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  const auto px = train[0].select(0, 2).to_vector<double>();  // all pixels 100
  CHECK(px[0] == doctest::Approx((100.0 / 255 - 0.1307) / 0.3081).epsilon(1e-6));
  CHECK(px[783] == px[0]);

  // Wrong dims: 27x28 images; a label count that disagrees; a label that is not a digit.
  write_bytes(dir / "t10k-images-idx3-ubyte", idx({2, 27, 28}, std::vector<unsigned char>(2 * 27 * 28)));
  check_error([&] { data::mnist(dir.string(), data::Split::Test); }, {"[mnist]", "t10k-images", "wrong dims"});
  write_mnist(dir, "t10k", 2);
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx({3}, {1, 2, 3}));
  check_error([&] { data::mnist(dir.string(), data::Split::Test); }, {"[mnist]", "3 labels", "2 images"});
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx({2}, {1, 12}));
  check_error([&] { data::mnist(dir.string(), data::Split::Test); }, {"[mnist]", "label 12"});
  fs::remove_all(dir);
}

TEST_CASE("DataLoader batches in order, with drop_last") {
  Tensor x = arange(10.0, kFloat32).reshape({5, 2});
  Tensor y = arange(int64_t{5});
  data::DataLoader loader(data::TensorDataset{x, y}, {.batch_size = 2});
  CHECK(loader.size() == 3);
  std::vector<std::vector<int64_t>> seen;
  for (TensorList b : loader) {
    CHECK(b.size() == 2);
    CHECK(b[0].size(1) == 2);
    seen.push_back(b[1].to_vector<int64_t>());
  }
  CHECK(seen == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}});
  data::DataLoader dropping(data::TensorDataset{x, y}, {.batch_size = 2, .drop_last = true});
  CHECK(dropping.size() == 2);
  int n = 0;
  for (TensorList b : dropping) n += static_cast<int>(b[1].numel());
  CHECK(n == 4);
  check_error([&] { data::DataLoader(data::TensorDataset{x, y}, {.batch_size = 0}); }, {"[DataLoader]", "batch_size"});
  check_error([&] { data::TensorDataset(TensorList{x, arange(int64_t{4})}); }, {"[TensorDataset]", "4 samples"});
}

TEST_CASE("DataLoader shuffles with a seed: each epoch a permutation, reproducible") {
  Tensor x = arange(100.0, kFloat32).reshape({50, 2});
  Tensor y = arange(int64_t{50});
  data::DataLoaderOptions o{.batch_size = 8, .shuffle = true, .seed = 7};
  data::DataLoader a(data::TensorDataset{x, y}, o), b(data::TensorDataset{x, y}, o);
  auto epoch = [](data::DataLoader& l) {
    std::vector<int64_t> ids;
    for (TensorList batch : l) {
      auto v = batch[1].to_vector<int64_t>();
      auto xs = batch[0].to_vector<float>();
      for (size_t i = 0; i < v.size(); ++i) CHECK(xs[2 * i] == static_cast<float>(2 * v[i]));  // rows stay paired
      ids.insert(ids.end(), v.begin(), v.end());
    }
    return ids;
  };
  auto a0 = epoch(a), a1 = epoch(a), b0 = epoch(b);
  CHECK(a0 == b0);
  CHECK(a0 != a1);
  CHECK(std::set<int64_t>(a0.begin(), a0.end()).size() == 50);
  std::vector<int64_t> sorted(50);
  std::iota(sorted.begin(), sorted.end(), 0);
  CHECK(a0 != sorted);
  // set_epoch replays an epoch, as a resumed run needs.
  b.set_epoch(1);
  CHECK(epoch(b) == a1);
  data::DataLoader c(data::TensorDataset{x, y}, {.batch_size = 8, .shuffle = true, .seed = 8});
  CHECK(epoch(c) != a0);
}

TEST_CASE("DistributedSampler: disjoint shards that cover the data, one shuffle per epoch, padded to equal length") {
  const int64_t n = 10;
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    std::vector<int64_t> count(n, 0);
    for (int r = 0; r < world; ++r) {
      hg::data::DistributedSampler s(n, world, r, {.shuffle = true, .seed = 3});
      auto idx = s.indices(0);
      CHECK(static_cast<int64_t>(idx.size()) == (n + world - 1) / world);
      CHECK(idx == s.indices(0));  // the same epoch gives the same order
      CHECK(idx != s.indices(1));  // another epoch reshuffles
      for (int64_t i : idx) ++count[i];
    }
    int64_t total = 0;
    for (int64_t c : count) {
      CHECK(c >= 1);  // every sample is read; the padding repeats at most one per rank
      total += c;
    }
    CHECK(total == ((n + world - 1) / world) * world);
  }
  hg::data::DistributedSampler plain(5, 2, 1, {.shuffle = false});
  CHECK(plain.indices(0) == std::vector<int64_t>{1, 3, 0});  // strided, padded from the start
  hg::data::DistributedSampler dropped(5, 2, 1, {.shuffle = false, .drop_last = true});
  CHECK(dropped.indices(0) == std::vector<int64_t>{1, 3});
  CHECK_THROWS_WITH_AS(hg::data::DistributedSampler(5, 2, 2), doctest::Contains("[DistributedSampler] rank 2"),
                       hg::Error);
}
