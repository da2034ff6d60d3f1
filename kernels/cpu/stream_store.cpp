#include "kernels/cpu/stream_store.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace hg::cpu {

namespace {

// The largest-level cache of cpu0 in /sys/devices/system/cpu/cpu0/cache/index*/ ("32768K"), or 0.
int64_t sysfs_last_level_cache() {
  int best_level = 0;
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
    int64_t bytes = 0;
    try {
      bytes = std::stoll(size);
    } catch (...) {
      continue;
    }
    const char unit = size.back();
    bytes *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
    if (level > best_level && bytes > 0) best_level = level, best = bytes;
  }
  return best;
}

}  // namespace

int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    if (const int64_t sysfs = sysfs_last_level_cache(); sysfs > 0) return sysfs;
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? static_cast<int64_t>(l3) : int64_t{32} << 20;
  }();
  return bytes;
}

}  // namespace hg::cpu
