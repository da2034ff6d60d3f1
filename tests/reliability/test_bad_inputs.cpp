// Bad input never crashes: sizes, allocation failures, corrupt files (every input the reliability
// review and the fuzzers found is replayed from tests/data/bad-inputs), checkpoint values.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "examples/common.h"
#include "tests/cpu/helpers.h"
#include "tests/reliability/temp_dir.h"

namespace fs = std::filesystem;
using namespace hg;
using hg::test::check_error;
using hg::test::TempDir;

namespace {

fs::path data_dir() { return fs::path(HG_TEST_DATA_DIR) / "bad-inputs"; }

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// The model, optimizer and scaler the checkpoint bad inputs were made for.
struct SmallRun {
  nn::Sequential model{std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(6, 5),
                       std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(5, 3)};
  optim::SGD opt{model.parameters(), {.lr = 0.05, .momentum = 0.9}};
  amp::GradScaler scaler{Device(kCPU), {.enabled = true}};
};

}  // namespace

TEST_CASE("sizes: overflowing, negative and huge shapes are hg::Errors") {
  check_error([] { zeros({int64_t{1} << 62}); }, {"[zeros]", "too large"});
  check_error([] { empty({int64_t{1} << 62}); }, {"[empty]", "too large"});
  check_error([] { empty({int64_t{1} << 62}, kUInt8); }, {"[empty]", "cannot allocate"});
  check_error([] { randn({int64_t{1} << 40, int64_t{1} << 40}); }, {"[randn]", "too large"});
  check_error([] { randn({-1, 3}); }, {"[randn]", "negative dimension"});
  check_error([] { rand({-2}); }, {"[rand]", "negative dimension"});
  check_error([] { randint(0, 5, {3, -1}); }, {"[randint]", "negative dimension"});
  check_error([] { ones({int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31}); }, {"[ones]", "too large"});
  // Zero elements, but an extent whose strides would overflow.
  check_error([] { empty({0, int64_t{1} << 40, int64_t{1} << 40}); }, {"[empty]", "too large"});
  check_error([] { arange(0.0, 1e300, 1.0); }, {"[arange]", "too many"});
  check_error([] { reshape(zeros({4}), {int64_t{1} << 40, int64_t{1} << 40, 0}); }, {"[reshape]"});
  check_error([] { as_strided(zeros({4}), {2, 2}, {INT64_MAX, 1}, 0); }, {"[as_strided]"});
  // The failure names the bytes asked for and what the allocator holds.
  try {
    empty({int64_t{1} << 60}, kFloat32);
    FAIL("expected an hg::Error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("4611686018427387904 bytes") != std::string::npos);
    CHECK(msg.find("held") != std::string::npos);
  }
  // An allocation failure inside an op names that op.
  const Tensor big = expand(zeros({1, 1}), {int64_t{1} << 30, int64_t{1} << 30});
  check_error([&] { (void)(big + 1.0); }, {"cannot allocate", "[1073741824, 1073741824]"});
  // Ordinary sizes still work.
  CHECK(zeros({0, 5}).numel() == 0);
  CHECK(randn({3, 4}).numel() == 12);
}

TEST_CASE("bad inputs: every committed safetensors / IDX regression case is an hg::Error") {
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(data_dir() / "safetensors")) {
    INFO(entry.path().string());
    check_error(
        [&] {
          const StateDict sd = load(entry.path().string());
          for (const auto& [k, t] : sd) (void)t.to(kFloat64).sum().item<double>();
        },
        {"[load]"});
    ++cases;
  }
  for (const auto& entry : fs::directory_iterator(data_dir() / "idx")) {
    INFO(entry.path().string());
    check_error(
        [&] {
          const Tensor t = data::read_idx(entry.path().string());
          (void)t.to(kFloat32).sum().item<double>();
        },
        {"[read_idx]"});
    ++cases;
  }
  CHECK(cases >= 6);
  check_error([] { load((data_dir() / "safetensors/handmade-numel-wrap.safetensors").string()); },
              {"too large", "'b'"});
  check_error(
      [] { load((data_dir() / "safetensors/handmade-deep-nesting-100000-stack-overflow.safetensors").string()); },
      {"nested deeper than 32"});
  check_error([] { load((data_dir() / "safetensors/crash-f8ed700e0fe5d678d037557e2d3b644ee39a0924").string()); },
              {"BOOL tensor 'bool' holds byte 255"});
}

TEST_CASE("bad inputs: directories, FIFOs, empty and special files are hg::Errors") {
  TempDir dir;
  check_error([&] { load(dir.path.string()); }, {"[load]", "a directory"});
  check_error([&] { load_metadata(dir.path.string()); }, {"[load]", "a directory"});
  check_error([&] { data::read_idx(dir.path.string()); }, {"[read_idx]", "a directory"});
  const fs::path fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  check_error([&] { load(fifo.string()); }, {"[load]", "a FIFO"});
  check_error([&] { data::read_idx(fifo.string()); }, {"[read_idx]", "a FIFO"});
  write_bytes(dir.path / "empty", "");
  check_error([&] { load((dir.path / "empty").string()); }, {"[load]", "truncated"});
  check_error([&] { data::read_idx((dir.path / "empty").string()); }, {"[read_idx]", "truncated"});
  check_error([&] { load("/dev/null"); }, {"[load]", "character device"});
  // A file whose size changes while it is read. sysfs files report 4096 bytes and hold fewer (the
  // read ends early: "shrank"); /proc files report 0 and hold more ("grew"). Both deterministic.
  if (fs::exists("/sys/devices/system/cpu/online") && fs::file_size("/sys/devices/system/cpu/online") == 4096) {
    check_error([&] { load("/sys/devices/system/cpu/online"); }, {"[load]", "shrank while being read"});
    check_error([&] { data::read_idx("/sys/devices/system/cpu/online"); }, {"[read_idx]", "shrank"});
  }
  check_error([&] { load("/proc/self/status"); }, {"[load]", "grew while being read"});
  // A value nested deep inside an entry (not just the header's top) is refused without recursion.
  std::string deep = R"({"t":{"dtype":"F32","shape":)" + std::string(5000, '[') + std::string(5000, ']') +
                     R"(,"data_offsets":[0,0]}})";
  write_bytes(dir.path / "deep.st", safetensors_bytes(deep, ""));
  check_error([&] { load((dir.path / "deep.st").string()); }, {"nested deeper"});
  // Wrong JSON types are named by type, never dumped.
  write_bytes(dir.path / "types.st",
              safetensors_bytes(R"({"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", "abcd"));
  check_error([&] { load((dir.path / "types.st").string()); }, {"holds a array"});
  write_bytes(
      dir.path / "big-dim.st",
      safetensors_bytes(R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", "abcd"));
  check_error([&] { load((dir.path / "big-dim.st").string()); }, {"too large"});
}

TEST_CASE("bad inputs: checkpoint restore range-checks every number") {
  for (const char* name : {"handmade-epoch-nan-hang.safetensors", "handmade-growth-interval-1e300.safetensors",
                           "handmade-stoul-invalid-argument.safetensors", "handmade-stoul-out-of-range.safetensors"}) {
    INFO(name);
    SmallRun run;
    check_error(
        [&] { examples::load_checkpoint((data_dir() / "checkpoint" / name).string(), run.model, run.opt, run.scaler); },
        {"load_state_dict"});
  }
  // A good checkpoint of the same run restores; then each number is corrupted in turn.
  TempDir dir;
  SmallRun run;
  const std::string good = (dir.path / "good.st").string();
  examples::save_checkpoint(good, run.model, run.opt, run.scaler, 1);
  CHECK(examples::load_checkpoint(good, run.model, run.opt, run.scaler) == 1);
  const StateDict base = load(good);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Bad {
    const char* key;
    double value;
    const char* fragment;
  };
  const Bad bads[] = {{"epoch", nan, "'epoch' is nan"},
                      {"epoch", -5, "'epoch' is -5"},
                      {"epoch", 1e12, "'epoch'"},
                      {"epoch", 1.5, "whole number"},
                      {"optim.lr", nan, "'lr' is nan"},
                      {"optim.lr", -1, "'lr' is -1"},
                      {"optim.lr", inf, "'lr' is inf"},
                      {"optim.hp.momentum", -3, "invalid momentum"},
                      {"optim.hp.nesterov", 0.5, "invalid nesterov"},
                      {"optim.steps", -7, "'steps' is -7"},
                      {"scaler.growth_interval", 1e300, "'growth_interval'"},
                      {"scaler.growth_interval", 0, "'growth_interval'"},
                      {"scaler.growth_tracker", -1, "'growth_tracker'"},
                      {"scaler.scale", nan, "'scale' is nan"},
                      {"scaler.growth_factor", 0.5, "growth_factor"}};
  for (const Bad& b : bads) {
    INFO(b.key << " = " << b.value);
    StateDict sd = base;
    sd[b.key] = scalar_tensor(b.value, kFloat64);
    const std::string path = (dir.path / "bad.st").string();
    save(sd, path, {{"format", "halfgrad-training"}});
    SmallRun fresh;
    const double lr_before = fresh.opt.lr();
    check_error([&] { examples::load_checkpoint(path, fresh.model, fresh.opt, fresh.scaler); }, {b.fragment});
    if (std::string(b.key).starts_with("optim.")) CHECK(fresh.opt.lr() == lr_before);  // nothing half-loaded
  }
  // Wrong shapes and non-scalar values.
  StateDict sd = base;
  sd["optim.lr"] = zeros({2}, kFloat64);
  save(sd, (dir.path / "shape.st").string());
  check_error([&] { examples::load_checkpoint((dir.path / "shape.st").string(), run.model, run.opt, run.scaler); },
              {"must hold one number"});
  // LR scheduler state.
  optim::StepLR sched(run.opt, 2);
  check_error(
      [&] {
        sched.load_state_dict({{"base_lr", scalar_tensor(nan, kFloat64)}, {"last_epoch", scalar_tensor(0.0, kInt64)}});
      },
      {"[StepLR]", "'base_lr' is nan"});
  check_error(
      [&] {
        sched.load_state_dict({{"base_lr", scalar_tensor(0.1, kFloat64)}, {"last_epoch", scalar_tensor(-9.0, kInt64)}});
      },
      {"[StepLR]", "'last_epoch'"});
  // Adam step counts.
  nn::Linear lin(2, 2);
  optim::Adam adam(lin.parameters(), {});
  StateDict ad = adam.state_dict();
  ad["state.0.step"] = scalar_tensor(nan, kFloat64);
  check_error([&] { adam.load_state_dict(ad); }, {"'state.0.step' is nan"});
  ad.erase("state.0.step");
  ad["state.x.step"] = scalar_tensor(1.0, kInt64);
  check_error([&] { adam.load_state_dict(ad); }, {"does not start with a parameter index"});
}

TEST_CASE("data: DataLoader::size does not overflow for huge batches") {
  const data::TensorDataset ds({zeros({10, 2})});
  CHECK(data::DataLoader(ds, {.batch_size = INT64_MAX}).size() == 1);
  CHECK(data::DataLoader(ds, {.batch_size = INT64_MAX, .drop_last = true}).size() == 0);
  CHECK(data::DataLoader(ds, {.batch_size = 3}).size() == 4);
  CHECK(data::DataLoader(ds, {.batch_size = 5}).size() == 2);
}
