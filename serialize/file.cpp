#include "serialize/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>

#include "framework/error.h"

namespace hg {

namespace {
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}
}  // namespace

std::vector<char> read_regular_file(const std::string& path, std::string_view op, uint64_t max_bytes) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  HG_CHECK(f.fd >= 0, op, "{}: cannot open the file: {}", path, std::strerror(errno));
  struct stat st {};
  HG_CHECK(::fstat(f.fd, &st) == 0, op, "{}: cannot stat the file: {}", path, std::strerror(errno));
  HG_CHECK(S_ISREG(st.st_mode), op, "{}: is {}, expected a regular file", path, kind_of(st.st_mode));
  const auto size = static_cast<uint64_t>(st.st_size);
  HG_CHECK(size <= max_bytes, op, "{}: the file has {} bytes, more than the {} bytes this loader accepts", path, size,
           max_bytes);
  std::vector<char> bytes;
  try {
    bytes.resize(size);
  } catch (const std::bad_alloc&) {
    fail(op, "{}: out of memory reading {} bytes", path, size);
  }
  uint64_t got = 0;
  while (got < size) {
    const ssize_t r = ::read(f.fd, bytes.data() + got, size - got);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    HG_CHECK(r >= 0, op, "{}: read error: {}", path, std::strerror(errno));
    HG_CHECK(r > 0, op, "{}: the file shrank while being read ({} of {} bytes read)", path, got, size);
    got += static_cast<uint64_t>(r);
  }
  char extra = 0;
  ssize_t r;
  while ((r = ::read(f.fd, &extra, 1)) < 0 && errno == EINTR) {
  }
  HG_CHECK(r == 0, op, "{}: the file grew while being read (expected {} bytes)", path, size);
  return bytes;
}

void write_file_atomic(const std::string& path, std::string_view op, std::initializer_list<std::string_view> parts) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  HG_CHECK(target.has_filename(), op, "{}: names a directory, expected a file name", path);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  // The temporary sits in the same directory: rename is atomic only within one file system.
  // O_EXCL with a random name rather than mkstemp, so the file gets 0666 less the umask as any
  // file a program creates (mkstemp makes it 0600).
  const std::string prefix = (fs::path(dir) / ("." + target.filename().string() + ".tmp.")).string();
  std::string tmp;
  Fd f{-1};
  std::random_device rd;
  for (int attempt = 0; attempt < 100 && f.fd < 0; ++attempt) {
    tmp = prefix + std::to_string(rd());
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f.fd < 0 && errno != EEXIST) break;
  }
  HG_CHECK(f.fd >= 0, op, "{}: cannot create a temporary file in {}: {}", path, dir, std::strerror(errno));
  try {
    for (std::string_view part : parts) {
      const char* p = part.data();
      size_t left = part.size();
      while (left > 0) {
        const ssize_t w = ::write(f.fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        HG_CHECK(w > 0, op, "{}: write failed: {}", path, std::strerror(errno));
        p += w;
        left -= static_cast<size_t>(w);
      }
    }
    HG_CHECK(::fsync(f.fd) == 0, op, "{}: fsync failed: {}", path, std::strerror(errno));
    const int fd = f.fd;
    f.fd = -1;
    HG_CHECK(::close(fd) == 0, op, "{}: close failed: {}", path, std::strerror(errno));
    HG_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, op, "{}: rename from {} failed: {}", path, tmp,
             std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // Makes the rename itself durable.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace hg
