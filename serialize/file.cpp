#include "serialize/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <random>
#include <utility>

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

namespace {
// Where a write really goes: a symlink followed to its final target.
struct WriteTarget {
  std::string file;         // the path that is renamed over
  std::string dir;          // its directory
  std::string temp_prefix;  // "<dir>/.<name>.tmp." (the name shortened when long)
  std::optional<mode_t> existing_mode;
};

WriteTarget resolve_write_target(const std::string& path, std::string_view op) {
  namespace fs = std::filesystem;
  HG_CHECK(!path.empty(), op, "empty path");
  fs::path p(path);
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    HG_CHECK(hops < 40, op, "{}: too many levels of symbolic links", path);
    const fs::path link = fs::read_symlink(p, ec);
    HG_CHECK(!ec, op, "{}: cannot read the symbolic link {}: {}", path, p.string(), ec.message());
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  WriteTarget t;
  t.file = p.string();
  HG_CHECK(p.has_filename(), op, "{}: names a directory, expected a file name", path);
  t.dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  struct stat st {};
  if (::stat(t.file.c_str(), &st) == 0) {
    HG_CHECK(S_ISREG(st.st_mode), op, "{}: {} exists and is not a regular file; refusing to replace it", path, t.file);
    t.existing_mode = st.st_mode;
  } else {
    HG_CHECK(errno == ENOENT, op, "{}: cannot check {}: {}", path, t.file, std::strerror(errno));
    struct stat dst {};
    HG_CHECK(::stat(t.dir.c_str(), &dst) == 0 && S_ISDIR(dst.st_mode), op,
             "{}: cannot create a temporary file in {}: the directory does not exist", path, t.dir);
  }
  // NAME_MAX is 255: ".", ".tmp." and a 6-character suffix must fit beside the name.
  std::string name = p.filename().string();
  if (name.size() > 200) name = name.substr(0, 200);
  t.temp_prefix = (fs::path(t.dir) / ("." + name + ".tmp.")).string();
  return t;
}

std::string temp_suffix() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::string s(6, 'x');
  for (char& c : s) c = kChars[rd() % (sizeof(kChars) - 1)];
  return s;
}

// Temporaries of earlier writes to the same target that were killed before their rename. One
// still being written by a live writer holds its lock and is left alone.
void remove_stale_temporaries(const WriteTarget& target) {
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
}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path, std::string_view op) : path_(path), op_(op) {
  const WriteTarget target = resolve_write_target(path, op);
  target_ = target.file;
  dir_ = target.dir;
  remove_stale_temporaries(target);
  // O_EXCL: a fresh file; 0666 so the kernel applies the umask, as for any file a program creates.
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_ = target.temp_prefix + temp_suffix();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    const int err = errno;
    temp_.clear();
    fail(op_, "{}: cannot create a temporary file in {}: {}", path_, dir_, std::strerror(err));
  }
  // Held until the descriptor closes: tells a concurrent writer's cleanup this file is in use.
  ::flock(fd_, LOCK_EX | LOCK_NB);
  // Replacing a file keeps its permissions.
  if (target.existing_mode) ::fchmod(fd_, *target.existing_mode & 07777);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  HG_CHECK(fd_ >= 0 && !committed_, op_, "{}: write after the file was committed", path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    HG_CHECK(w > 0, op_, "{}: write failed: {}", path_, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit(const std::function<void(const char*)>& after_step) {
  HG_CHECK(fd_ >= 0 && !committed_, op_, "{}: the file was already committed", path_);
  const auto step = [&](const char* name) {
    if (after_step) after_step(name);
  };
  HG_CHECK(::fsync(fd_) == 0, op_, "{}: fsync failed: {}", path_, std::strerror(errno));
  step("fsync");
  const int fd = std::exchange(fd_, -1);
  HG_CHECK(::close(fd) == 0, op_, "{}: close failed: {}", path_, std::strerror(errno));
  step("close");
  HG_CHECK(::rename(temp_.c_str(), target_.c_str()) == 0, op_, "{}: rename from {} failed: {}", path_, temp_,
           std::strerror(errno));
  committed_ = true;
  step("rename");
  // Makes the rename itself durable.
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view op, std::initializer_list<std::string_view> parts) {
  AtomicFileWriter file(path, op);
  for (std::string_view part : parts) file.write(part.data(), part.size());
  file.commit();
}

void check_writable_path(const std::string& path, std::string_view op) {
  const WriteTarget target = resolve_write_target(path, op);
  HG_CHECK(::access(target.dir.c_str(), W_OK | X_OK) == 0, op, "{}: cannot write into {}: {}", path, target.dir,
           std::strerror(errno));
}

}  // namespace hg
