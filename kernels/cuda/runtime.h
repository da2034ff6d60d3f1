// The backend's view of the CUDA runtime: the current device and stream, a device guard, and
// the one counted place where the host waits for a device. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "framework/device.h"

namespace hg::cuda {

int device_count_cached();  // 0 when no driver or no device
int current_device();
// The stream all halfgrad work on `device` is queued on (created on first use, never the
// legacy default stream, so other libraries' default-stream work does not serialise with it).
cudaStream_t current_stream(int device);
inline cudaStream_t current_stream(Device d) { return current_stream(d.index); }
const cudaDeviceProp& device_properties(int device);

// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device d) : DeviceGuard(d.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int current_ = -1;
};

// Every host wait the backend makes goes through these two, which count it (host_sync_count).
void host_sync(cudaStream_t stream);
void host_sync_device();  // cudaDeviceSynchronize
// Device-to-host copy on `stream`, finished when it returns (counted as one host sync).
void copy_to_host(void* dst, const void* src, size_t nbytes, cudaStream_t stream);

// The grid for a 1-d loop over n elements, each thread taking `per_thread` elements, capped so
// grid-stride loops keep every SM busy without launching millions of idle blocks.
unsigned grid_for(int64_t n, int threads, int per_thread, int device);

}  // namespace hg::cuda
