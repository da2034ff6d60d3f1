// Peak memory of one benchmark cell: the process's resident-set high-water mark on CPU
// (VmHWM, reset per cell through /proc/self/clear_refs), the allocator's peak on CUDA.
#pragma once

#include <cstdint>
#include <string>

#include <halfgrad.h>

namespace amp_bench {

// Releases cached blocks (halfgrad's CPU cache, glibc's free lists) and resets the resident
// high-water mark to the current resident size. Returns the resident bytes now.
int64_t reset_host_peak();
// VmHWM in bytes (0 where /proc is not readable).
int64_t host_peak_bytes();
// VmRSS in bytes.
int64_t host_rss_bytes();

// CUDA: whether the build has a usable device, a full synchronisation, the allocator's peak
// (since the process started: the CUDA allocator has no peak reset yet), and the TF32 switch.
bool cuda_available();
void cuda_synchronize();
int64_t cuda_peak_bytes();
void cuda_set_tf32(bool on);

}  // namespace amp_bench
