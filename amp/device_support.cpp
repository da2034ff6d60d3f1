#include "amp/device_support.h"

#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace hg::amp {

void warn_once_unavailable(DeviceType device, const char* what) {
  static std::mutex mutex;
  static std::set<std::pair<DeviceType, std::string>> warned;
  {
    std::lock_guard lock(mutex);
    if (!warned.emplace(device, what).second) return;
  }
  std::fprintf(stderr,
               "halfgrad warning: %s was asked for on %s, but no %s device is available; it stays disabled "
               "(this warning is shown once)\n",
               what, device == kCUDA ? "cuda" : "cpu", device == kCUDA ? "CUDA" : "CPU");
}

}  // namespace hg::amp
