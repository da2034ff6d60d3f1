// Host and device memory readings.
#include "memory.h"

#include <malloc.h>

#include <fstream>
#include <sstream>

#include "framework/cuda.h"

namespace amp_bench {

namespace {

int64_t status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      int64_t kib = 0;
      fields >> kib;
      return kib;
    }
  }
  return 0;
}

}  // namespace

int64_t reset_host_peak() {
  hg::cpu_empty_cache();
  ::malloc_trim(0);
  // "5" resets the peak resident set size (Linux >= 4.0); ignored where not permitted.
  std::ofstream("/proc/self/clear_refs") << "5";
  return host_rss_bytes();
}

int64_t host_peak_bytes() { return status_kib("VmHWM") * 1024; }
int64_t host_rss_bytes() { return status_kib("VmRSS") * 1024; }

bool cuda_available() { return hg::cuda::is_available(); }
void cuda_synchronize() { hg::cuda::synchronize(); }
int64_t cuda_peak_bytes() { return hg::cuda::memory_stats(0).peak_allocated; }
void cuda_set_tf32(bool on) { hg::set_allow_tf32(on); }

}  // namespace amp_bench
