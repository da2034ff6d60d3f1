// Checkpoints in the safetensors format (readable by PyTorch's safetensors and other tools):
// an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the raw little-endian data. Dtypes are kept as they are (F16, BF16 included).
#pragma once

#include <map>
#include <string>

#include "serialize/state_dict.h"

namespace hg {

// Free-form string pairs stored under the header's "__metadata__" key.
using Metadata = std::map<std::string, std::string>;

// Writes `tensors` to `path`. The file is written to a temporary file in the same directory,
// flushed to disk and renamed over `path`, so a crash leaves either the old file or the new one;
// temporaries left by a killed save are removed by the next save to the same path. A symlink at
// `path` is followed (its target is written); a directory, FIFO or device there is refused. A new
// file's mode follows the umask; a replaced file keeps its mode.
void save(const StateDict& tensors, const std::string& path, const Metadata& metadata = {});
// Checks, before any work, that save() to `path` can succeed as far as can be known: the
// directory exists and is writable, and `path` is not a special file. Throws "[save] ...".
void check_save_path(const std::string& path);

// Reads every tensor of a safetensors file onto the CPU. A damaged file (bad header length,
// invalid JSON, unknown dtype, offsets or sizes that do not match, truncation) throws
// hg::Error "[load] <path>: <what is wrong>".
StateDict load(const std::string& path);
// The "__metadata__" pairs of a safetensors file (empty when there are none).
Metadata load_metadata(const std::string& path);

// The safetensors name of a dtype ("F32", "BF16", ...), and back (throws on an unknown name).
std::string safetensors_dtype(Dtype dtype);
Dtype dtype_from_safetensors(const std::string& name);

// Composing checkpoints: every key of `part` with `prefix` in front, and the entries of `all`
// whose key starts with `prefix`, with the prefix removed.
StateDict with_prefix(const StateDict& part, const std::string& prefix);
StateDict strip_prefix(const StateDict& all, const std::string& prefix);

}  // namespace hg
