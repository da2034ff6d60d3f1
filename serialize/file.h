// Reading whole files for the loaders (safetensors, IDX): regular files only, size-capped, and
// every failure an hg::Error naming the op and the path, never a stream or allocation exception.
// Writing a file atomically, for the writers that need no more than that (token files).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace hg {

// The bytes of the regular file at `path`. Throws "[op] <path>: ..." when it cannot be opened,
// is not a regular file (a directory, FIFO, device), is larger than `max_bytes`, or changes size
// while being read. Opening never blocks (a FIFO is refused, not waited on).
std::vector<char> read_regular_file(const std::string& path, std::string_view op, uint64_t max_bytes);

// Writes the concatenation of `parts` to `path` so that a crash leaves either the old file or the
// whole new one: a temporary file beside it, fsync, rename over `path`, fsync of the directory.
// Throws "[op] <path>: ..." on any failure, removing the temporary file. (hg::save keeps its own
// version, which also follows symlinks, keeps permissions and cleans up killed saves.)
void write_file_atomic(const std::string& path, std::string_view op, std::initializer_list<std::string_view> parts);

}  // namespace hg
