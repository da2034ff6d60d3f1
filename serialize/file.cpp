#include "serialize/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

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

}  // namespace hg
