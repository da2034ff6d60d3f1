// Reading whole files for the loaders (safetensors, IDX): regular files only, size-capped, and
// every failure an hg::Error naming the op and the path, never a stream or allocation exception.
// Writing a file atomically (AtomicFileWriter), for every writer.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace hg {

// The bytes of the regular file at `path`. Throws "[op] <path>: ..." when it cannot be opened,
// is not a regular file (a directory, FIFO, device), is larger than `max_bytes`, or changes size
// while being read. Opening never blocks (a FIFO is refused, not waited on).
std::vector<char> read_regular_file(const std::string& path, std::string_view op, uint64_t max_bytes);

// Writes a file so that a crash leaves either the old file or the whole new one: a temporary file
// beside the target, fsync, rename over it, fsync of the directory. Every writer of files that
// must survive a crash uses it (hg::save, token files, traces). A symlink is followed to its final
// target (the link stays a link); a directory, FIFO or device there is refused, never replaced; a
// replaced file keeps its permissions; temporaries of earlier writes that were killed before their
// rename are removed. Errors read "[op] <path>: ...", and the temporary never outlives a failure.
class AtomicFileWriter {
 public:
  AtomicFileWriter(const std::string& path, std::string_view op);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(const void* data, size_t n);
  // fsync, close, rename, then fsync of the directory. `after_step` (crash tests) is told each of
  // "fsync", "close" and "rename" once it is done.
  void commit(const std::function<void(const char*)>& after_step = {});

 private:
  std::string path_, op_, target_, dir_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The concatenation of `parts` written to `path` with an AtomicFileWriter.
void write_file_atomic(const std::string& path, std::string_view op, std::initializer_list<std::string_view> parts);

// Throws "[op] <path>: ..." now when a write to `path` would fail for its location (no such
// directory, no permission to write into it, not a regular file there), before hours of work.
void check_writable_path(const std::string& path, std::string_view op);

}  // namespace hg
