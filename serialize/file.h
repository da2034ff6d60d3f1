// Reading whole files for the loaders (safetensors, IDX): regular files only, size-capped, and
// every failure an hg::Error naming the op and the path, never a stream or allocation exception.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hg {

// The bytes of the regular file at `path`. Throws "[op] <path>: ..." when it cannot be opened,
// is not a regular file (a directory, FIFO, device), is larger than `max_bytes`, or changes size
// while being read. Opening never blocks (a FIFO is refused, not waited on).
std::vector<char> read_regular_file(const std::string& path, std::string_view op, uint64_t max_bytes);

}  // namespace hg
