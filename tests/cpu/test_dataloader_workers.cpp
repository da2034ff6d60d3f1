// The Dataset interface, transforms and collation; DataLoader worker threads: the same batches
// in the same order with any num_workers, exceptions named by batch, a bounded prefetch queue,
// and clean shutdown when a pass is abandoned or the loader goes away.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "helpers.h"

using namespace hg;
using hg::test::check_error;

namespace {

// Sample i: x = {i, i*i} (float32 [2]) and y = i (int64, 0-d). Counts get() calls; may sleep in
// get() (to let workers run ahead) or throw for one index.
class Squares : public data::Dataset {
 public:
  explicit Squares(int64_t n, int64_t bad = -1, std::chrono::microseconds delay = {})
      : n_(n), bad_(bad), delay_(delay) {}
  int64_t size() const override { return n_; }
  data::Sample get(int64_t i) const override {
    calls_.fetch_add(1);
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (i == bad_) throw std::runtime_error("broken sample " + std::to_string(i));
    const auto f = static_cast<float>(i);
    return {tensor(std::vector<float>{f, f * f}), scalar_tensor(static_cast<double>(i), kInt64)};
  }
  int64_t calls() const { return calls_.load(); }

 private:
  int64_t n_, bad_;
  std::chrono::microseconds delay_;
  mutable std::atomic<int64_t> calls_{0};
};

// Every batch of one pass, flattened: the x values then the y values of each batch.
std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> pass(data::DataLoader& loader) {
  std::vector<std::pair<std::vector<float>, std::vector<int64_t>>> out;
  for (TensorList b : loader) out.emplace_back(b[0].to_vector<float>(), b[1].to_vector<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("a user-defined Dataset: get() per sample, each field stacked into the batch") {
  auto ds = std::make_shared<Squares>(7);
  data::DataLoader loader(ds, {.batch_size = 3});
  CHECK(loader.size() == 3);
  std::vector<int64_t> ys, sizes;
  for (TensorList b : loader) {
    REQUIRE(b.size() == 2);
    CHECK(b[0].dim() == 2);
    CHECK(b[0].size(1) == 2);
    CHECK(b[0].dtype() == kFloat32);
    CHECK(b[1].dim() == 1);
    CHECK(b[1].dtype() == kInt64);
    const auto x = b[0].to_vector<float>();
    const auto y = b[1].to_vector<int64_t>();
    sizes.push_back(b[0].size(0));
    for (size_t i = 0; i < y.size(); ++i) {
      CHECK(x[2 * i] == static_cast<float>(y[i]));
      CHECK(x[2 * i + 1] == static_cast<float>(y[i] * y[i]));
    }
    ys.insert(ys.end(), y.begin(), y.end());
  }
  CHECK(ys == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(sizes == std::vector<int64_t>{3, 3, 1});
  CHECK(ds->calls() == 7);  // each sample fetched once per pass
}

TEST_CASE("TensorDataset: get(i) is row i, get_batch gathers rows; a custom collate sees the samples") {
  const Tensor x = arange(12.0, kFloat32).reshape({6, 2});
  const Tensor y = arange(int64_t{6});
  const data::TensorDataset ds{x, y};
  const data::Sample s = ds.get(4);
  CHECK(s[0].shape() == Shape{2});
  CHECK(s[0].to_vector<float>() == std::vector<float>{8, 9});
  CHECK(s[1].item<int64_t>() == 4);
  const TensorList b = ds.get_batch({5, 0});
  CHECK(b[0].to_vector<float>() == std::vector<float>{10, 11, 0, 1});
  CHECK(b[1].to_vector<int64_t>() == std::vector<int64_t>{5, 0});
  // A non-contiguous tensor goes through get() and default_collate: the same batch.
  const data::TensorDataset strided{x.t().contiguous().t(), y};
  CHECK(strided.get_batch({5, 0})[0].to_vector<float>() == b[0].to_vector<float>());
  check_error([&] { (void)ds.get(6); }, {"[TensorDataset]", "index 6", "6 samples"});
  check_error([&] { (void)ds.get_batch({0, -1}); }, {"[TensorDataset]", "index -1"});

  // A collate that sums the labels of each batch.
  data::DataLoader summing(std::make_shared<data::TensorDataset>(ds), {.batch_size = 4, .collate = [](const auto& ss) {
                                                                         int64_t sum = 0;
                                                                         for (const auto& smp : ss)
                                                                           sum += smp[1].template item<int64_t>();
                                                                         return TensorList{scalar_tensor(sum, kInt64)};
                                                                       }});
  std::vector<int64_t> sums;
  for (TensorList batch : summing) sums.push_back(batch[0].item<int64_t>());
  CHECK(sums == std::vector<int64_t>{0 + 1 + 2 + 3, 4 + 5});
}

TEST_CASE("default_collate refuses samples that disagree, naming the sample and field") {
  std::vector<data::Sample> ok{{zeros({2}), scalar_tensor(1, kInt64)}, {ones({2}), scalar_tensor(2, kInt64)}};
  const TensorList b = data::default_collate(ok);
  CHECK(b[0].shape() == Shape{2, 2});
  CHECK(b[1].to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  check_error([] { data::default_collate({{zeros({2})}, {zeros({3})}}); }, {"[collate]", "sample 1 field 0", "[3]"});
  check_error([] { data::default_collate({{zeros({2})}, {zeros({2}, kFloat64)}}); }, {"[collate]", "sample 1"});
  check_error(
      [] {
        data::default_collate({{zeros({2})}, {zeros({2}), zeros({2})}});
      },
      {"[collate]", "sample 1 has 2 fields"});
  check_error([] { data::default_collate({}); }, {"[collate]", "no samples"});
}

TEST_CASE("transforms: map, Compose, Normalize per channel, Lambda on one field") {
  // Field 0 [2, 3]: channel 0 is 0..2, channel 1 is 10..12; field 1 a label.
  const Tensor x =
      (arange(6.0, kFloat32).reshape({1, 2, 3}) + tensor(std::vector<float>{0, 7}).reshape({1, 2, 1})).contiguous();
  const data::TensorDataset base{x, tensor(std::vector<int64_t>{4})};
  auto ds = data::map(base, data::Compose{data::Normalize({1.0, 11.0}, {2.0, 0.5}),
                                          data::Lambda([](const Tensor& t) { return t * 10; }, 1)});
  CHECK(ds->size() == 1);
  const data::Sample s = ds->get(0);
  CHECK(s[0].dtype() == kFloat32);
  CHECK(s[0].to_vector<float>() == std::vector<float>{-0.5f, 0.0f, 0.5f, -2.0f, 0.0f, 2.0f});
  CHECK(s[1].item<int64_t>() == 40);
  // One mean for all elements; integer input becomes float32, float64 stays float64.
  const data::Sample u = data::Normalize({1.0}, {2.0})({tensor(std::vector<uint8_t>{1, 3, 5})});
  CHECK(u[0].dtype() == kFloat32);
  CHECK(u[0].to_vector<float>() == std::vector<float>{0, 1, 2});
  CHECK(data::Normalize({1.0}, {2.0})({full({2}, 3.0, kFloat64)})[0].dtype() == kFloat64);
  // The loader applies them: batches of the mapped dataset.
  data::DataLoader loader(ds, {.batch_size = 1, .num_workers = 1});
  for (TensorList b : loader) CHECK(b[0].shape() == Shape{1, 2, 3});

  check_error([] { data::Normalize({1.0, 2.0}, {1.0}); }, {"[Normalize]", "2 and 1"});
  check_error([] { data::Normalize({0.0}, {0.0}); }, {"[Normalize]", "non-zero std"});
  check_error([] { data::Normalize({0.0, 0.0}, {1.0, 1.0})({zeros({3, 4})}); }, {"[Normalize]", "2 channel", "[3, 4]"});
  check_error([] { data::Normalize({0.0}, {1.0}, 2)({zeros({3})}); }, {"[Normalize]", "field 2", "1 fields"});
  check_error([] { data::Lambda([](const Tensor& t) { return t; }, 1)({zeros({3})}); }, {"[Lambda]", "field 1"});
  check_error([] { data::Compose{data::Transform{}}; }, {"[Compose]", "transform 0 is empty"});
  check_error([] { data::map(nullptr, data::Compose{}); }, {"[map]", "no dataset"});
}

TEST_CASE("DataLoader gives the same batches, in order, with 0, 1 or 3 workers, epoch after epoch") {
  auto ds = std::make_shared<Squares>(23);
  for (const uint64_t seed : {uint64_t{0}, uint64_t{7}}) {
    for (const bool drop_last : {false, true}) {
      data::DataLoader serial(ds, {.batch_size = 5, .shuffle = true, .seed = seed, .drop_last = drop_last});
      const auto e0 = pass(serial), e1 = pass(serial);
      CHECK(e0.size() == (drop_last ? 4u : 5u));
      CHECK(e0.back().second.size() == (drop_last ? 5u : 3u));
      CHECK(e0 != e1);  // the shuffle moves on with the epoch
      // The batches follow order(epoch) exactly.
      const auto order0 = serial.order(0);
      std::vector<int64_t> ids;
      for (const auto& b : e0) ids.insert(ids.end(), b.second.begin(), b.second.end());
      CHECK(ids == std::vector<int64_t>(order0.begin(), order0.begin() + static_cast<std::ptrdiff_t>(ids.size())));
      for (const int workers : {1, 3}) {
        for (const int prefetch : {1, 2}) {
          CAPTURE(seed);
          CAPTURE(workers);
          CAPTURE(prefetch);
          data::DataLoader threaded(ds, {.batch_size = 5,
                                         .shuffle = true,
                                         .seed = seed,
                                         .drop_last = drop_last,
                                         .num_workers = workers,
                                         .prefetch_factor = prefetch});
          CHECK(threaded.size() == serial.size());
          CHECK(pass(threaded) == e0);
          CHECK(threaded.epoch() == 1);
          CHECK(pass(threaded) == e1);
          threaded.set_epoch(0);  // a resumed run replays an epoch
          CHECK(pass(threaded) == e0);
        }
      }
    }
  }
  // A different seed, a different order.
  data::DataLoader a(ds, {.batch_size = 5, .shuffle = true, .seed = 1, .num_workers = 2});
  data::DataLoader b(ds, {.batch_size = 5, .shuffle = true, .seed = 2, .num_workers = 2});
  CHECK(pass(a) != pass(b));
  // More workers than batches, and an empty dataset.
  data::DataLoader few(ds, {.batch_size = 20, .num_workers = 4});
  CHECK(pass(few).size() == 2);
  data::DataLoader none(std::make_shared<Squares>(0), {.batch_size = 2, .num_workers = 2});
  CHECK(none.size() == 0);
  CHECK(pass(none).empty());
}

TEST_CASE(
    "an exception in a worker's get() reaches the loop, naming the sample, its type and the batch, original nested") {
  for (const int workers : {0, 2}) {
    CAPTURE(workers);
    auto ds = std::make_shared<Squares>(20, 13);
    data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    std::vector<int64_t> good;
    int errors = 0;
    auto it = loader.begin();
    for (int64_t i = 0; i < loader.size(); ++i, ++it) {
      try {
        const TensorList b = *it;
        good.push_back(b[1].to_vector<int64_t>().front());
      } catch (const Error& e) {
        ++errors;
        const std::string msg = e.what();
        CHECK_MESSAGE(msg.find("[DataLoader] sample 13 (batch 3 of epoch 0): std::runtime_error: broken sample 13") !=
                          std::string::npos,
                      msg);
        try {
          std::rethrow_if_nested(e);
          FAIL_CHECK("no nested exception");
        } catch (const std::runtime_error& inner) {
          CHECK(std::string(inner.what()) == "broken sample 13");
        }
      }
    }
    CHECK(errors == 1);
    CHECK(good == std::vector<int64_t>{0, 4, 8, 16});  // the other batches still come
  }
  // A transform's error and a collation error are named the same way.
  auto bad_transform = data::map(std::make_shared<Squares>(6), [](data::Sample s) -> data::Sample {
    if (s[1].item<int64_t>() == 4) fail("my_transform", "cannot take 4");
    return s;
  });
  data::DataLoader t(bad_transform, {.batch_size = 2, .num_workers = 3});
  check_error([&] { pass(t); }, {"[DataLoader] sample 4 (batch 2 of epoch 0): [my_transform] cannot take 4"});
  auto ragged = data::map(std::make_shared<Squares>(4), [](data::Sample s) -> data::Sample {
    if (s[1].item<int64_t>() == 3) s[0] = zeros({5});
    return s;
  });
  data::DataLoader r(ragged, {.batch_size = 2, .num_workers = 1});
  // Each sample alone is fine: the batch is named.
  check_error([&] { pass(r); }, {"[DataLoader] batch 1 of epoch 0: [collate]", "sample 1 field 0"});
}

TEST_CASE("workers fetch at most num_workers * prefetch_factor batches ahead") {
  auto ds = std::make_shared<Squares>(400, -1, std::chrono::microseconds(200));
  data::DataLoader loader(ds, {.batch_size = 4, .num_workers = 2, .prefetch_factor = 2});
  auto it = loader.begin();
  (void)*it;
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // plenty for 4 batches, far from 100
  const int64_t ahead = ds->calls();
  CHECK(ahead >= 4);      // batch 0 at least
  CHECK(ahead <= 4 * 4);  // the queue bound: 2 workers * 2 batches of 4 samples
  ++it;
  (void)*it;
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  CHECK(ds->calls() <= 5 * 4);  // one slot freed, one more batch
}

TEST_CASE("abandoning a pass or destroying the loader stops the workers") {
  auto ds = std::make_shared<Squares>(1000, -1, std::chrono::microseconds(100));
  {
    data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 3, .prefetch_factor = 4});
    int seen = 0;
    for (TensorList b : loader) {
      if (++seen == 3) break;  // the pass's workers are joined as the loop's iterator goes
    }
    const int64_t after = ds->calls();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(ds->calls() == after);  // no worker still fetching
    CHECK(after < 1000);
    CHECK(ds.use_count() == 2);  // this test and the loader: the pass let go of the dataset
    // A pass started and never read, then dropped.
    { auto it = loader.begin(); }
    CHECK(ds.use_count() == 2);
  }
  CHECK(ds.use_count() == 1);
  // The loader destroyed while a pass is under way: the pass keeps what it needs and goes on.
  auto loader = std::make_unique<data::DataLoader>(ds, data::DataLoaderOptions{.batch_size = 2, .num_workers = 2});
  auto it = loader->begin();
  CHECK((*it)[1].to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  loader.reset();
  ++it;
  CHECK((*it)[1].to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  it = data::DataLoader::Iterator(nullptr, 0);  // the last reference: workers stop and are joined
  CHECK(ds.use_count() == 1);
}

TEST_CASE("DataLoader options are checked; pin_memory without CUDA is ignored") {
  auto ds = std::make_shared<Squares>(5);
  check_error([&] { data::DataLoader(ds, {.num_workers = -1}); }, {"[DataLoader]", "num_workers", "-1"});
  check_error([&] { data::DataLoader(ds, {.prefetch_factor = 0}); }, {"[DataLoader]", "prefetch_factor"});
  check_error([&] { data::DataLoader(nullptr, {}); }, {"[DataLoader]", "no dataset"});
  data::DataLoader loader(ds, {.batch_size = 2});
  auto it = loader.begin();
  for (int i = 0; i < 3; ++i) ++it;
  CHECK(it == loader.end());
  check_error([&] { (void)*loader.end(); }, {"[DataLoader]", "end iterator"});
  if (!cuda::is_available()) {
    data::DataLoader pinned(ds, {.batch_size = 2, .num_workers = 1, .pin_memory = true});
    const auto batches = pass(pinned);
    CHECK(batches == pass(loader));
    for (TensorList b : pinned) CHECK_FALSE(cuda::is_pinned(b[0]));
  }
  if (!cuda::is_built()) check_error([] { cuda::pin_memory(zeros({2})); }, {"[pin_memory]", "without CUDA"});
}
