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

// Where a save really goes. A symlink is followed to its final target (the link stays a link,
// as with any editor); a directory, FIFO or device there is refused, never replaced.
struct SaveTarget {
  std::string file;         // the path that is renamed over
  std::string dir;          // its directory
  std::string temp_prefix;  // "<dir>/.<name>.tmp." (the name shortened when long)
  std::optional<mode_t> existing_mode;
};

SaveTarget resolve_save_target(const std::string& path) {
  namespace fs = std::filesystem;
  HG_CHECK(!path.empty(), "save", "empty path");
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    HG_CHECK(hops < 40, "save", "{}: too many levels of symbolic links", path);
    const fs::path link = fs::read_symlink(p, ec);
    HG_CHECK(!ec, "save", "{}: cannot read the symbolic link {}: {}", path, p.string(), ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  SaveTarget t;
  t.file = p.string();
  HG_CHECK(p.has_filename(), "save", "{}: names a directory, expected a file name", path);
  t.dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  struct stat st {};
  if (::stat(t.file.c_str(), &st) == 0) {
    HG_CHECK(S_ISREG(st.st_mode), "save", "{}: {} exists and is not a regular file; refusing to replace it", path,
             t.file);
    t.existing_mode = st.st_mode;
  } else {
    HG_CHECK(errno == ENOENT, "save", "{}: cannot check {}: {}", path, t.file, std::strerror(errno));
    struct stat dst {};
    HG_CHECK(::stat(t.dir.c_str(), &dst) == 0 && S_ISDIR(dst.st_mode), "save",
             "{}: cannot create a temporary file in {}: the directory does not exist", path, t.dir);
  }
  // NAME_MAX is 255: ".", ".tmp." and a 6-character suffix must fit beside the name.
  std::string name = p.filename().string();
  if (name.size() > 200) name = name.substr(0, 200);
  t.temp_prefix = (fs::path(t.dir) / ("." + name + ".tmp.")).string();
  return t;
}

std::string random_suffix() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::string s(6, 'x');
  for (char& c : s) c = kChars[rd() % (sizeof(kChars) - 1)];
  return s;
}

// Temporaries of earlier saves to the same target that were killed before their rename. One
// still being written by a live save holds its lock and is left alone.
void remove_stale_temporaries(const SaveTarget& target) {
  namespace fs = std::filesystem;
  const std::string prefix = fs::path(target.temp_prefix).filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(target.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != prefix.size() + 6 || !name.starts_with(prefix)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0)
      ::unlink(it->path().c_str());
    ::close(fd);
  }
}

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

  const SaveTarget target = resolve_save_target(path);
  remove_stale_temporaries(target);
  TempFile tmp;
  tmp.path = target.temp_prefix + random_suffix();
  // O_EXCL: a fresh file; 0666 so the kernel applies the umask, as for any file a program creates.
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (tmp.fd < 0) {
    const int err = errno;
    tmp.path.clear();
    fail("save", "{}: cannot create a temporary file in {}: {}", path, target.dir, std::strerror(err));
  }
  // Held until the descriptor closes: tells a concurrent save's cleanup this file is in use.
  ::flock(tmp.fd, LOCK_EX | LOCK_NB);
  // Replacing a file keeps its permissions.
  if (target.existing_mode) ::fchmod(tmp.fd, *target.existing_mode & 07777);

  uint64_t header_len = json.size();
  write_all(tmp.fd, reinterpret_cast<const char*>(&header_len), 8, path);
  test_hook("header");
  write_all(tmp.fd, json.data(), json.size(), path);
  for (const Tensor& t : data) {
    write_all(tmp.fd, static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * element_size(t.dtype()),
              path);
    test_hook("tensor");
  }
  HG_CHECK(::fsync(tmp.fd) == 0, "save", "{}: fsync failed: {}", path, std::strerror(errno));
  test_hook("fsync");
  HG_CHECK(::close(tmp.fd) == 0, "save", "{}: close failed: {}", path, std::strerror(errno));
  tmp.fd = -1;
  test_hook("close");
  HG_CHECK(::rename(tmp.path.c_str(), target.file.c_str()) == 0, "save", "{}: rename from {} failed: {}", path,
           tmp.path, std::strerror(errno));
  tmp.keep = true;
  test_hook("rename");
  // Makes the rename itself durable.
  const int dfd = ::open(target.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void check_save_path(const std::string& path) {
  const SaveTarget target = resolve_save_target(path);
  HG_CHECK(::access(target.dir.c_str(), W_OK | X_OK) == 0, "save", "{}: cannot write into {}: {}", path, target.dir,
           std::strerror(errno));
}

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
