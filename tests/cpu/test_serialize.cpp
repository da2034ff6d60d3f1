// safetensors: round trip in every dtype, the file layout, atomic writes, damaged files.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "helpers.h"

using namespace hg;
using hg::test::check_error;
using hg::test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with the given JSON header (padded to 8 bytes) and data bytes.
std::string file_with(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

}  // namespace

TEST_CASE("safetensors round trip keeps every dtype, shape and value") {
  const auto dir = temp_dir("st");
  StateDict sd;
  Tensor base = tensor(std::vector<double>{0.5, -1.25, 3, 0, 7, -2}, {2, 3});
  for (Dtype dt : kAllDtypes) sd[fmt::format("t.{}", dtype_name(dt))] = base.to(dt);
  sd["scalar"] = scalar_tensor(42, kInt64);
  sd["empty"] = zeros({0, 4});
  sd["strided"] = base.t();  // saved contiguous
  const std::string path = (dir / "a.safetensors").string();
  save(sd, path, {{"format", "pt"}});
  StateDict back = load(path);
  REQUIRE(back.size() == sd.size());
  for (const auto& entry : sd) {
    const std::string& name = entry.first;  // no structured binding: clang 14 cannot capture one
    const Tensor& t = entry.second;
    INFO(name);
    const Tensor& b = back.at(name);
    CHECK(b.dtype() == t.dtype());
    CHECK(b.shape() == t.shape());
    CHECK(b.to_vector<double>() == t.to_vector<double>());
  }
  CHECK(load_metadata(path) == Metadata{{"format", "pt"}});
  // Only the final file is left behind.
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
  fs::remove_all(dir);
}

TEST_CASE("the file layout is the safetensors one") {
  const auto dir = temp_dir("st_layout");
  const std::string path = (dir / "b.safetensors").string();
  save({{"w", tensor(std::vector<float>{1, 2}).to(kBFloat16)}}, path);
  const std::string bytes = read_all(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  CHECK(header.find(R"("w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]})") != std::string::npos);
  CHECK(bytes.size() == 8 + n + 4);
  // bfloat16 1.0 is 0x3f80, stored little-endian.
  CHECK(static_cast<unsigned char>(bytes[8 + n]) == 0x80);
  CHECK(static_cast<unsigned char>(bytes[8 + n + 1]) == 0x3f);
  // Overwriting replaces the file.
  save({{"v", ones({1})}}, path);
  CHECK(load(path).count("v") == 1);
  CHECK(load(path).count("w") == 0);
  fs::remove_all(dir);
}

TEST_CASE("damaged safetensors files give clear errors") {
  const auto dir = temp_dir("st_bad");
  const std::string path = (dir / "bad.safetensors").string();
  auto expect = [&](const std::string& bytes, const std::string& what) {
    write_all(path, bytes);
    check_error([&] { load(path); }, {"[load]", path, what});
  };
  const std::string good = file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x'));
  write_all(path, good);
  CHECK(load(path).at("a").shape() == Shape{2});

  expect("abc", "too short for the 8-byte header length");
  expect(good.substr(0, good.size() - 3), "truncated");
  expect(good.substr(0, 20), "truncated");
  std::string huge = good;
  huge[7] = 0x7f;
  expect(huge, "bad header length");
  expect(file_with("{not json", ""), "invalid JSON");
  expect(file_with("[1,2]", ""), "expected a JSON object");
  expect(file_with(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x')),
         "bad dtype 'F33'");
  expect(file_with(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')), "wrong sizes");
  expect(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, 'x')), "reversed");
  expect(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(12, 'x')),
         "4 bytes of data after the last tensor");
  expect(
      file_with(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
          std::string(8, 'x')),
      "overlap or gap");
  expect(file_with(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, 'x')), "shape of 'a'");
  expect(file_with(R"({"a":{"dtype":"F32","shape":[1]}})", ""), "needs dtype, shape and data_offsets");
  check_error([&] { load((dir / "missing").string()); }, {"[load]", "cannot open"});
  check_error([&] { save({{"x", ones({1})}}, (dir / "no/such/dir/x").string()); }, {"[save]", "temporary file"});
  fs::remove_all(dir);
}

TEST_CASE("with_prefix and strip_prefix compose checkpoints") {
  StateDict model{{"w", ones({1})}, {"b", zeros({1})}};
  StateDict all = with_prefix(model, "model.");
  all["epoch"] = scalar_tensor(3, kInt64);
  CHECK(all.count("model.w") == 1);
  StateDict back = strip_prefix(all, "model.");
  CHECK(back.size() == 2);
  CHECK(back.count("b") == 1);
}
