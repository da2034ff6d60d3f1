// Token files (llm.c's layout) and TokenDataset: the header, checks on load, windows and targets,
// shuffling from a seed, sharding across ranks, resuming from a saved state, synthetic tokens.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "data/token_dataset.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;
using hg::test::temp_dir;
namespace fs = std::filesystem;

namespace {

// A file of tokens 0, 1, 2, ... (mod vocab) so every window says where it came from.
std::string write_counting_file(const fs::path& dir, int64_t n, int32_t vocab = 50257) {
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint16_t>(i % vocab);
  const std::string path = (dir / "tokens.bin").string();
  data::write_token_file(path, tokens, vocab);
  return path;
}

void write_raw(const std::string& path, const std::vector<int32_t>& header, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> h(256, 0);
  std::copy(header.begin(), header.end(), h.begin());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(h.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

std::vector<int64_t> starts(const data::TokenDataset& ds, data::TokenDatasetState at) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < ds.options().batch_size; ++r) out.push_back(ds.window_start(at, r));
  return out;
}

}  // namespace

TEST_CASE("token file: llm.c's header, then uint16 tokens, read back") {
  const auto dir = temp_dir("tokfile");
  const std::string path = write_counting_file(dir, 1000, 300);
  CHECK(fs::file_size(path) == 1024 + 2000);
  std::ifstream in(path, std::ios::binary);
  int32_t header[4];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == 1000);
  CHECK(header[3] == 300);
  const data::TokenFile f(path);
  CHECK(f.size() == 1000);
  CHECK(f.vocab_size() == 300);
  CHECK(f.data()[299] == 299);
  CHECK(f.data()[300] == 0);
  // No temporary is left beside it.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
  check_error(
      [&] {
        data::write_token_file(path, std::vector<uint16_t>{1, 300}, 300);
      },
      {"[write_token_file]", "token 300 at position 1"});
  fs::remove_all(dir);
}

TEST_CASE("token file: hostile files give one-line errors naming the file") {
  const auto dir = temp_dir("tokfile_bad");
  const std::string p = (dir / "bad.bin").string();
  auto check = [&](std::initializer_list<std::string> fragments, int32_t vocab = 0) {
    try {
      data::TokenFile f(p, vocab);
      FAIL_CHECK("expected an hg::Error");
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find('\n') == std::string::npos, msg);
      CHECK_MESSAGE(msg.find("[token_file] " + p + ": ") == 0, msg);
      for (const auto& f : fragments) CHECK_MESSAGE(msg.find(f) != std::string::npos, msg);
    }
  };
  std::ofstream(p) << "short";
  check({"truncated", "5 bytes"});
  write_raw(p, {12345, 1, 2, 10}, {1, 2});
  check({"bad magic number 12345"});
  write_raw(p, {20240520, 2, 2, 10}, {1, 2});
  check({"version 2"});
  write_raw(p, {20240520, 1, 3, 10}, {1, 2});
  check({"says 3 tokens", "truncated"});
  write_raw(p, {20240520, 1, 1, 10}, {1, 2});
  check({"says 1 tokens", "extra bytes"});
  write_raw(p, {20240520, 1, -5, 10}, {});
  check({"negative token count"});
  write_raw(p, {20240520, 1, 2, 10}, {1, 10});
  check({"token 10 at position 1", "vocabulary size 10"});
  write_raw(p, {20240520, 1, 2, 70000}, {1, 2});
  check({"vocabulary size 70000"});
  write_raw(p, {20240520, 1, 2, 10}, {1, 2});
  check({"vocabulary size is 10, expected 50257"}, 50257);
  write_raw(p, {20240520, 1, 2, 0}, {1, 2});  // llm.c's files: no size recorded
  check({"records no vocabulary size"});
  CHECK(data::TokenFile(p, 50257).vocab_size() == 50257);
  check_error([&] { data::TokenFile f(dir.string()); }, {"[token_file]", "not a regular file"});
  check_error([&] { data::TokenFile f((dir / "missing.bin").string()); },
              {"[token_file]", "missing.bin", "cannot open"});
  fs::remove_all(dir);
}

TEST_CASE("token dataset: windows of T+1, targets one token later, bad options") {
  const auto dir = temp_dir("tokds");
  const std::string path = write_counting_file(dir, 101);
  const data::TokenDataset ds(path, {.batch_size = 2, .seq_len = 10, .shuffle = false});
  CHECK(ds.num_windows() == 10);  // (101 - 1) / 10
  CHECK(ds.steps_per_epoch() == 5);
  const data::TokenBatch b = ds.batch({0, 1});
  CHECK(b.inputs.shape() == Shape{2, 10});
  CHECK(b.inputs.dtype() == kInt64);
  CHECK(b.targets.dtype() == kInt64);
  const auto x = b.inputs.to_vector<int64_t>();
  const auto y = b.targets.to_vector<int64_t>();
  CHECK(x[0] == 20);  // sequential: step 1 holds windows 2 and 3
  CHECK(x[10] == 30);
  for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i] + 1);
  CHECK(ds.batch({0, 4}).targets.to_vector<int64_t>().back() == 100);  // the last token is used

  check_error([&] { data::TokenDataset d(path, {.batch_size = 1, .seq_len = 101}); },
              {"[TokenDataset]", path, "window of seq_len + 1 = 102 tokens is larger than the 101 tokens"});
  check_error([&] { data::TokenDataset d(path, {.batch_size = 6, .seq_len = 10, .world_size = 2}); },
              {"[TokenDataset]", "10 windows", "fewer than one step needs (batch_size 6 x world_size 2)"});
  check_error([&] { data::TokenDataset d(path, {.batch_size = 0, .seq_len = 10}); }, {"batch_size 0"});
  check_error([&] { data::TokenDataset d(path, {.batch_size = 1, .seq_len = 10, .rank = 2, .world_size = 2}); },
              {"rank 2"});
  data::TokenDataset d(path, {.batch_size = 2, .seq_len = 10});
  check_error([&] { d.set_state({0, 5}); }, {"[TokenDataset]", "epoch 0, step 5", "5 steps"});
  check_error([&] { d.set_state({-1, 0}); }, {"[TokenDataset]"});
  check_error([&] { (void)d.batch({0, -1}); }, {"[TokenDataset]"});
  fs::remove_all(dir);
}

TEST_CASE("token dataset: shuffling is a per-epoch permutation fixed by the seed") {
  const auto dir = temp_dir("tokds_seed");
  const std::string path = write_counting_file(dir, 1000);
  const data::TokenDatasetOptions o{.batch_size = 3, .seq_len = 7, .seed = 42};
  data::TokenDataset a(path, o), b(path, o);
  auto o2 = o;
  o2.seed = 43;
  data::TokenDataset c(path, o2);
  CHECK(a.steps_per_epoch() == 47);  // 142 windows / 3
  std::set<int64_t> seen;
  bool differs_from_other_seed = false;
  for (int64_t s = 0; s < a.steps_per_epoch(); ++s) {
    const auto sa = starts(a, a.state());
    CHECK(sa == starts(b, b.state()));
    differs_from_other_seed |= sa != starts(c, c.state());
    const data::TokenBatch ba = a.next(), bb = b.next();
    c.next();
    CHECK(ba.inputs.to_vector<int64_t>() == bb.inputs.to_vector<int64_t>());
    CHECK(ba.inputs.to_vector<int64_t>()[0] == sa[0] % 50257);
    for (int64_t st : sa) {
      CHECK(st % 7 == 0);
      CHECK(st / 7 < 142);
      CHECK(seen.insert(st).second);  // no window twice in an epoch
    }
  }
  CHECK(differs_from_other_seed);
  CHECK(a.state() == data::TokenDatasetState{1, 0});
  // The next epoch is another order.
  CHECK(starts(a, {1, 0}) != starts(a, {0, 0}));
  fs::remove_all(dir);
}

TEST_CASE("token dataset: ranks take disjoint windows of each step") {
  const auto dir = temp_dir("tokds_shard");
  const std::string path = write_counting_file(dir, 5000);
  for (bool shuffle : {false, true}) {
    std::set<int64_t> all;
    int64_t total = 0;
    for (int rank = 0; rank < 3; ++rank) {
      const data::TokenDataset ds(
          path, {.batch_size = 4, .seq_len = 16, .shuffle = shuffle, .seed = 5, .rank = rank, .world_size = 3});
      CHECK(ds.steps_per_epoch() == 26);  // 312 windows / 12
      for (int64_t s = 0; s < ds.steps_per_epoch(); ++s)
        for (int64_t st : starts(ds, {0, s})) {
          all.insert(st);
          ++total;
        }
    }
    CHECK(total == 26 * 12);
    CHECK(static_cast<int64_t>(all.size()) == total);
  }
  fs::remove_all(dir);
}

TEST_CASE("token dataset: a restored state gives the same batches") {
  const auto dir = temp_dir("tokds_resume");
  const std::string path = write_counting_file(dir, 3000);
  const data::TokenDatasetOptions o{.batch_size = 4, .seq_len = 32, .seed = 9};
  data::TokenDataset run(path, o);
  for (int i = 0; i < 30; ++i) run.next();  // past the 23-step epoch
  const data::TokenDatasetState saved = run.state();
  CHECK(saved == data::TokenDatasetState{1, 7});
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(run.next().inputs.to_vector<int64_t>());
  data::TokenDataset resumed(path, o);
  resumed.set_state(saved);
  for (int i = 0; i < 20; ++i) CHECK(resumed.next().inputs.to_vector<int64_t>() == expected[i]);
  fs::remove_all(dir);
}

TEST_CASE("token dataset: synthetic tokens are a function of the seed") {
  const data::TokenDatasetOptions o{.batch_size = 2, .seq_len = 64, .seed = 1};
  auto a = data::TokenDataset::synthetic(int64_t{1} << 40, 50257, 3, o);
  auto b = data::TokenDataset::synthetic(int64_t{1} << 40, 50257, 3, o);
  auto c = data::TokenDataset::synthetic(int64_t{1} << 40, 50257, 4, o);
  const auto xa = a.next().inputs.to_vector<int64_t>();
  CHECK(xa == b.next().inputs.to_vector<int64_t>());
  CHECK(xa != c.next().inputs.to_vector<int64_t>());
  std::set<int64_t> distinct(xa.begin(), xa.end());
  CHECK(distinct.size() > 100);
  for (int64_t t : xa) CHECK((t >= 0 && t < 50257));
  const data::TokenBatch batch = a.batch({0, 0});
  const auto x = batch.inputs.to_vector<int64_t>(), y = batch.targets.to_vector<int64_t>();
  for (size_t i = 0; i + 1 < 64; ++i) CHECK(y[i] == x[i + 1]);
  check_error([&] { data::TokenDataset::synthetic(10, 0, 0, o); }, {"[TokenDataset]", "vocabulary size 0"});
}
