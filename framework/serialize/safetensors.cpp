#include "framework/serialize/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "framework/ops/creation.h"

namespace hg {

static_assert(std::endian::native == std::endian::little, "safetensors stores little-endian data");

namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the limit the reference implementation uses

struct DtypeName {
  Dtype dtype;
  const char* name;
};
constexpr DtypeName kDtypeNames[] = {{kFloat64, "F64"}, {kFloat32, "F32"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},
                                     {kInt64, "I64"},   {kInt32, "I32"},   {kUInt8, "U8"},    {kBool, "BOOL"}};

// Closes the descriptor and removes the temporary file unless the write completed.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

void write_all(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    HG_CHECK(w > 0, "save", "{}: write failed: {}", path, std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
  }
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

  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  TempFile tmp;
  tmp.path = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  std::vector<char> name_buf(tmp.path.begin(), tmp.path.end());
  name_buf.push_back('\0');
  tmp.fd = ::mkstemp(name_buf.data());
  if (tmp.fd < 0) {
    tmp.path.clear();
    fail("save", "{}: cannot create a temporary file in {}: {}", path, dir.string(), std::strerror(errno));
  }
  tmp.path = name_buf.data();

  uint64_t header_len = json.size();
  write_all(tmp.fd, reinterpret_cast<const char*>(&header_len), 8, path);
  write_all(tmp.fd, json.data(), json.size(), path);
  for (const Tensor& t : data)
    write_all(tmp.fd, static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * element_size(t.dtype()),
              path);
  HG_CHECK(::fsync(tmp.fd) == 0, "save", "{}: fsync failed: {}", path, std::strerror(errno));
  HG_CHECK(::close(tmp.fd) == 0, "save", "{}: close failed: {}", path, std::strerror(errno));
  tmp.fd = -1;
  HG_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "save", "{}: rename from {} failed: {}", path, tmp.path,
           std::strerror(errno));
  tmp.keep = true;
  // Makes the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {

struct Parsed {
  nlohmann::json header;
  std::vector<char> bytes;  // the whole file
  uint64_t data_start = 0;
};

Parsed parse(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  HG_CHECK(in.good(), "load", "{}: cannot open the file", path);
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  Parsed p;
  p.bytes.resize(size);
  in.read(p.bytes.data(), static_cast<std::streamsize>(size));
  HG_CHECK(in.good() || size == 0, "load", "{}: read error", path);
  HG_CHECK(size >= 8, "load", "{}: truncated: {} bytes, too short for the 8-byte header length", path, size);
  uint64_t header_len = 0;
  std::memcpy(&header_len, p.bytes.data(), 8);
  HG_CHECK(header_len <= kMaxHeader, "load", "{}: bad header length {} (more than {} bytes)", path, header_len,
           kMaxHeader);
  HG_CHECK(8 + header_len <= size, "load", "{}: truncated: the header claims {} bytes but the file has {} after it",
           path, header_len, size - 8);
  try {
    p.header = nlohmann::json::parse(p.bytes.begin() + 8, p.bytes.begin() + 8 + static_cast<int64_t>(header_len));
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
      HG_CHECK(d.is_number_unsigned(), "load", "{}: bad header: shape of '{}' holds {}", path, name, d.dump());
      shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      HG_CHECK(numel <= buffer, "load", "{}: wrong sizes: tensor '{}' of shape {} is larger than the data", path, name,
               shape);
    }
    HG_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(), "load",
             "{}: bad header: data_offsets of '{}' must be two unsigned integers, got {}", path, name, jo.dump());
    const auto begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    HG_CHECK(begin <= end, "load", "{}: bad header: data_offsets of '{}' are reversed [{}, {}]", path, name, begin,
             end);
    HG_CHECK(end <= buffer, "load", "{}: truncated: tensor '{}' needs bytes [{}, {}) but the data holds {}", path, name,
             begin, end, buffer);
    HG_CHECK(end - begin == numel * element_size(dtype), "load",
             "{}: wrong sizes: tensor '{}' ({} {}) needs {} bytes, data_offsets give {}", path, name, dtype, shape,
             numel * element_size(dtype), end - begin);
    Tensor t = empty(shape, dtype);
    if (end > begin) std::memcpy(t.raw_data(), p.bytes.data() + p.data_start + begin, end - begin);
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
