#include "data/mnist.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "framework/ops/creation.h"
#include "serialize/file.h"

namespace hg::data {

namespace {

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// IDX files hold at most 2^36 elements here (MNIST has 47 M); a larger claim is refused before
// any multiplication can overflow.
constexpr uint64_t kMaxIdxElements = uint64_t{1} << 36;

std::vector<unsigned char> read_file(const std::string& path) {
  try {
    const std::vector<char> raw = read_regular_file(path, "read_idx", kMaxIdxElements + 64);
    return std::vector<unsigned char>(raw.begin(), raw.end());
  } catch (const Error& e) {
    if (::access(path.c_str(), F_OK) != 0)
      fail("read_idx", "{}: cannot open the file: missing (run tools/fetch-mnist.sh)", path);
    throw;
  }
}

}  // namespace

Tensor read_idx(const std::string& path) {
  const std::vector<unsigned char> bytes = read_file(path);
  HG_CHECK(bytes.size() >= 4, "read_idx", "{}: truncated: {} bytes, too short for the 4-byte magic number", path,
           bytes.size());
  const uint32_t magic = big_endian_u32(bytes.data());
  HG_CHECK(bytes[0] == 0 && bytes[1] == 0, "read_idx",
           "{}: bad magic number 0x{:08x} (an IDX file starts with two zero bytes)", path, magic);
  HG_CHECK(bytes[2] == 0x08, "read_idx",
           "{}: bad magic number 0x{:08x}: element type 0x{:02x} is not unsigned byte (0x08)", path, magic, bytes[2]);
  const int ndim = bytes[3];
  HG_CHECK(ndim >= 1 && ndim <= 4, "read_idx", "{}: bad magic number 0x{:08x}: {} dimensions (expected 1 to 4)", path,
           magic, ndim);
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  HG_CHECK(bytes.size() >= header, "read_idx", "{}: truncated header: {} bytes, the {} dimension sizes need {}", path,
           bytes.size(), ndim, header);
  Shape shape;
  uint64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t n = big_endian_u32(bytes.data() + 4 + 4 * d);
    HG_CHECK(n > 0 && n <= (1u << 30), "read_idx", "{}: dimension {} has size {}", path, d, n);
    shape.push_back(n);
    // Checked before multiplying: count <= 2^36 and n <= 2^30 could otherwise wrap.
    HG_CHECK(count <= kMaxIdxElements / n, "read_idx", "{}: shape {} is implausibly large (more than {} elements)",
             path, shape, kMaxIdxElements);
    count *= n;
  }
  const size_t have = bytes.size() - header;
  HG_CHECK(have >= count, "read_idx", "{}: truncated: shape {} needs {} data bytes, the file holds {}", path, shape,
           count, have);
  HG_CHECK(have == count, "read_idx", "{}: {} unexpected bytes after the {} data bytes of shape {}", path, have - count,
           count, shape);
  Tensor out = empty(shape, kUInt8);
  std::memcpy(out.raw_data(), bytes.data() + header, count);
  return out;
}

TensorDataset mnist(const std::string& dir, Split split) {
  const std::string prefix = dir + (split == Split::Train ? "/train" : "/t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte";
  const std::string labels_path = prefix + "-labels-idx1-ubyte";
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  HG_CHECK(images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28, "mnist",
           "{}: wrong dims: images have shape {}, expected [N, 28, 28]", images_path, images.shape());
  HG_CHECK(labels.dim() == 1, "mnist", "{}: wrong dims: labels have shape {}, expected [N]", labels_path,
           labels.shape());
  HG_CHECK(labels.size(0) == images.size(0), "mnist", "{} holds {} labels but {} holds {} images", labels_path,
           labels.size(0), images_path, images.size(0));

  const int64_t n = images.size(0);
  Tensor x = empty({n, 1, 28, 28}, kFloat32);
  const auto* src = images.data_ptr<uint8_t>();
  auto* dst = x.data_ptr<float>();
  const float scale = static_cast<float>(1.0 / (255.0 * kMnistStd));
  const float shift = static_cast<float>(kMnistMean / kMnistStd);
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = static_cast<float>(src[i]) * scale - shift;

  Tensor y = empty({n}, kInt64);
  const auto* lsrc = labels.data_ptr<uint8_t>();
  auto* ldst = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    HG_CHECK(lsrc[i] <= 9, "mnist", "{}: label {} of sample {} is not a digit 0-9", labels_path, lsrc[i], i);
    ldst[i] = lsrc[i];
  }
  return TensorDataset({x, y});
}

}  // namespace hg::data
