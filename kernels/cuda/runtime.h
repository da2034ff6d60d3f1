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

// Errors found by kernels (a target or index out of range) without the host waiting for the
// verdict, like PyTorch's device-side asserts: the kernel records the first one here (host memory
// mapped into every device) and skips the bad element; the host raises it as an hg::Error naming
// the op at the next synchronisation it makes anyway (item(), to(kCPU), cuda::synchronize()).
enum class DeviceErrorKind : int { None = 0, TargetOutOfRange = 1, IndexOutOfRange = 2 };
struct DeviceErrorRecord {
  int kind;  // DeviceErrorKind; 0 while no error is recorded, claimed with atomicCAS
  int op;    // index into the names passed to device_error_op()
  long long position, value, limit;
};
// The record's device-visible address (the same for every device).
DeviceErrorRecord* device_error_record();
// A small integer naming `op` (a string literal) in DeviceErrorRecord::op.
int device_error_op(const char* op);
// Raises (and clears) a recorded error; host_sync() and friends call it after every wait.
void check_device_errors();

#ifdef __CUDACC__
// Records the first error; later ones (from any kernel) are dropped until the host raised it.
__device__ __forceinline__ void report_device_error(DeviceErrorRecord* rec, DeviceErrorKind kind, int op,
                                                    long long position, long long value, long long limit) {
  if (atomicCAS(&rec->kind, 0, -1) != 0) return;
  rec->op = op, rec->position = position, rec->value = value, rec->limit = limit;
  __threadfence_system();
  atomicExch(&rec->kind, static_cast<int>(kind));
}
#endif

// The grid for a 1-d loop over n elements, each thread taking `per_thread` elements, capped so
// grid-stride loops keep every SM busy without launching millions of idle blocks.
unsigned grid_for(int64_t n, int threads, int per_thread, int device);

}  // namespace hg::cuda
