#include "serialize/safetensors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <optional>
#include <random>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "framework/ops/creation.h"
#include "serialize/file.h"

namespace hg {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian data");

namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the limit the reference implementation uses
// A safetensors header is an object of objects holding flat arrays: depth 3. Anything much deeper
// is hostile (deep values cost stack in every recursive JSON routine), so parsing stops here.
constexpr int kMaxJsonDepth = 32;
// Whole files are read into memory; past this, refuse rather than ask for the memory.
constexpr uint64_t kMaxFile = uint64_t{1} << 40;

struct DtypeName {
  Dtype dtype;
  const char* name;
};
// The float8 names are safetensors' own (PyTorch's float8_e4m3fn and float8_e5m2).
constexpr DtypeName kDtypeNames[] = {
    {kFloat64, "F64"}, {kFloat32, "F32"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},      {kInt64, "I64"},
    {kInt32, "I32"},   {kUInt8, "U8"},    {kBool, "BOOL"},   {kFloat8E4M3, "F8_E4M3"}, {kFloat8E5M2, "F8_E5M2"}};

// Tests kill a save at a chosen point (HG_TEST_SAVE_KILL_AT=header|tensor|fsync|close|rename)
// to check the previous checkpoint survives; unset, this does nothing.
void test_hook(const char* point) {
  const char* at = std::getenv("HG_TEST_SAVE_KILL_AT");
  if (at != nullptr && std::strcmp(at, point) == 0) ::raise(SIGKILL);
}

}  // namespace

std::string safetensors_dtype(Dtype dtype) {
  for (const auto& d : kDtypeNames)
    if (d.dtype == dtype) return d.name;
  fail("save", "dtype {} has no safetensors name", dtype);
}

Dtype dtype_from_safetensors(const std::string& name) {
  for (const auto& d : kDtypeNames)
    if (name == d.name) return d.dtype;
  fail("load", "unknown or unsupported dtype '{}'", name);
}

void save(const StateDict& tensors, const std::string& path, const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HG_CHECK(name != "__metadata__", "save", "{}: '__metadata__' is reserved and cannot name a tensor", path);
    HG_CHECK(t.defined(), "save", "{}: tensor '{}' is undefined", path, name);
    Tensor c = t.detach().to(kCPU).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(c.numel()) * element_size(c.dtype());
    header[name] = {
        {"dtype", safetensors_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(std::move(c));
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as the reference does

  AtomicFileWriter file(path, "save");
  uint64_t header_len = json.size();
  file.write(&header_len, 8);
  test_hook("header");
  file.write(json.data(), json.size());
  for (const Tensor& t : data) {
    file.write(t.raw_data(), static_cast<size_t>(t.numel()) * element_size(t.dtype()));
    test_hook("tensor");
  }
  file.commit(test_hook);
}

void check_save_path(const std::string& path) { check_writable_path(path, "save"); }

namespace {

struct Parsed {
  nlohmann::json header;
  std::vector<char> bytes;  // the whole file
  uint64_t data_start = 0;
};

Parsed parse(const std::string& path) {
  Parsed p;
  p.bytes = read_regular_file(path, "load", kMaxFile);
  const uint64_t size = p.bytes.size();
  HG_CHECK(size >= 8, "load", "{}: truncated: {} bytes, too short for the 8-byte header length", path, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, p.bytes.data(), 8);
  HG_CHECK(header_len <= kMaxHeader, "load", "{}: bad header length {} (more than {} bytes)", path, header_len,
           kMaxHeader);
  HG_CHECK(8 + header_len <= size, "load", "{}: truncated: the header claims {} bytes but the file has {} after it",
           path, header_len, size - 8);
  const auto depth_cap = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    HG_CHECK(depth <= kMaxJsonDepth, "load", "{}: bad header: JSON nested deeper than {} levels", path, kMaxJsonDepth);
    return true;
  };
  try {
    p.header =
        nlohmann::json::parse(p.bytes.begin() + 8, p.bytes.begin() + 8 + static_cast<int64_t>(header_len), depth_cap);
  } catch (const nlohmann::json::exception& e) {
    fail("load", "{}: bad header: invalid JSON ({})", path, e.what());
  }
  HG_CHECK(p.header.is_object(), "load", "{}: bad header: expected a JSON object, got {}", path, p.header.type_name());
  p.data_start = 8 + header_len;
  return p;
}

}  // namespace

StateDict load(const std::string& path) {
  Parsed p = parse(path);
  const uint64_t buffer = p.bytes.size() - p.data_start;
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  StateDict out;
  for (const auto& [name, entry] : p.header.items()) {
    if (name == "__metadata__") continue;
    HG_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
             "load", "{}: bad header: entry '{}' needs dtype, shape and data_offsets", path, name);
    const auto& jd = entry["dtype"];
    const auto& js = entry["shape"];
    const auto& jo = entry["data_offsets"];
    HG_CHECK(jd.is_string(), "load", "{}: bad header: dtype of '{}' is not a string", path, name);
    const auto* known = std::find_if(std::begin(kDtypeNames), std::end(kDtypeNames),
                                     [&](const DtypeName& d) { return jd.get<std::string>() == d.name; });
    HG_CHECK(known != std::end(kDtypeNames), "load", "{}: bad dtype '{}' for tensor '{}'", path, jd.get<std::string>(),
             name);
    const Dtype dtype = known->dtype;
    HG_CHECK(js.is_array(), "load", "{}: bad header: shape of '{}' is not an array", path, name);
    Shape shape;
    uint64_t numel = 1;
    for (const auto& d : js) {
      // type_name(), never dump(): a hostile value can be nested deep enough to exhaust the stack.
      HG_CHECK(d.is_number_unsigned(), "load", "{}: bad header: shape of '{}' holds a {}, expected unsigned integers",
               path, name, d.type_name());
      const auto n = d.get<uint64_t>();
      HG_CHECK(n <= static_cast<uint64_t>(INT64_MAX), "load", "{}: bad header: dimension {} of '{}' is too large", path,
               n, name);
      shape.push_back(static_cast<int64_t>(n));
    }
    try {
      numel = static_cast<uint64_t>(checked_numel(shape, "load", element_size(dtype)));
    } catch (const Error& e) {
      fail("load", "{}: wrong sizes: tensor '{}': {}", path, name, std::string_view(e.what()).substr(7));  // "[load] "
    }
    HG_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(), "load",
             "{}: bad header: data_offsets of '{}' must be two unsigned integers", path, name);
    const auto begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    HG_CHECK(begin <= end, "load", "{}: bad header: data_offsets of '{}' are reversed [{}, {}]", path, name, begin,
             end);
    HG_CHECK(end <= buffer, "load", "{}: truncated: tensor '{}' needs bytes [{}, {}) but the data holds {}", path, name,
             begin, end, buffer);
    HG_CHECK(end - begin == numel * element_size(dtype), "load",
             "{}: wrong sizes: tensor '{}' ({} {}) needs {} bytes, data_offsets give {}", path, name, dtype, shape,
             numel * element_size(dtype), end - begin);
    const char* src = p.bytes.data() + p.data_start + begin;
    if (dtype == kBool) {
      // Any byte but 0 and 1 in a bool is undefined behaviour in every kernel that reads it.
      for (uint64_t i = 0; i < end - begin; ++i)
        HG_CHECK(src[i] == 0 || src[i] == 1, "load", "{}: bad data: BOOL tensor '{}' holds byte {} at element {}", path,
                 name, static_cast<unsigned>(static_cast<unsigned char>(src[i])), i);
    }
    Tensor t = empty(shape, dtype);
    if (end > begin) std::memcpy(t.raw_data(), src, end - begin);
    out[name] = std::move(t);
    ranges.push_back({begin, end, name});
  }
  // The tensors must tile the data exactly: no overlaps, holes or trailing bytes.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const auto& r : ranges) {
    HG_CHECK(r.begin == at, "load", "{}: wrong sizes: tensor '{}' starts at byte {}, expected {} (overlap or gap)",
             path, r.name, r.begin, at);
    at = r.end;
  }
  HG_CHECK(at == buffer, "load", "{}: wrong sizes: {} bytes of data after the last tensor", path, buffer - at);
  return out;
}

Metadata load_metadata(const std::string& path) {
  Parsed p = parse(path);
  Metadata out;
  if (!p.header.contains("__metadata__")) return out;
  const auto& m = p.header["__metadata__"];
  HG_CHECK(m.is_object(), "load", "{}: bad header: __metadata__ is not an object", path);
  for (const auto& [k, v] : m.items()) {
    HG_CHECK(v.is_string(), "load", "{}: bad header: __metadata__ value of '{}' is not a string", path, k);
    out[k] = v.get<std::string>();
  }
  return out;
}

StateDict with_prefix(const StateDict& part, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : part) out[prefix + k] = v;
  return out;
}

StateDict strip_prefix(const StateDict& all, const std::string& prefix) {
  StateDict out;
  for (auto it = all.lower_bound(prefix); it != all.end() && it->first.starts_with(prefix); ++it)
    out[it->first.substr(prefix.size())] = it->second;
  return out;
}

}  // namespace hg
