// Check macros for CUDA runtime, cuBLASLt and cuDNN calls: a failing call throws hg::Error
// naming the call, the error, the file and the line. Never aborts.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>

#include "framework/error.h"

#ifdef HG_WITH_CUDNN
#include <cudnn.h>
#endif

namespace hg::cuda::detail {

[[noreturn]] inline void throw_call_error(const char* lib, const char* call, const char* what, int code,
                                          const char* file, int line) {
  throw Error(fmt::format("[{}] {} failed: {} (code {}) at {}:{}", lib, call, what, code, file, line));
}

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) [[likely]]
    return;
  (void)cudaGetLastError();  // clear the recorded error so a later launch check does not report it again
  throw_call_error("cuda", call, cudaGetErrorString(e), static_cast<int>(e), file, line);
}

inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  throw_call_error("cublasLt", call, cublasLtGetStatusString(s), static_cast<int>(s), file, line);
}

#ifdef HG_WITH_CUDNN
inline void check_cudnn(cudnnStatus_t s, const char* call, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) [[likely]]
    return;
  throw_call_error("cudnn", call, cudnnGetErrorString(s), static_cast<int>(s), file, line);
}
#endif

// HG_CUDA_SYNC_DEBUG=1 (read once): every launch check also waits for the kernel, so a fault
// inside it (illegal address, device assert) is reported by the launch that caused it rather
// than by whichever call synchronises next. For debugging only: it makes every op a host sync
// (not counted by host_sync_count(), so the no-sync tests still describe the normal mode).
inline bool sync_debug() {
  static const bool on = [] {
    const char* v = std::getenv("HG_CUDA_SYNC_DEBUG");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

inline void check_launch(const char* file, int line) {
  check_cuda(cudaGetLastError(), "kernel launch", file, line);
  if (sync_debug()) [[unlikely]]
    check_cuda(cudaDeviceSynchronize(), "kernel execution (HG_CUDA_SYNC_DEBUG)", file, line);
}

}  // namespace hg::cuda::detail

#define HG_CUDA_CHECK(expr) ::hg::cuda::detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define HG_CUBLAS_CHECK(expr) ::hg::cuda::detail::check_cublas((expr), #expr, __FILE__, __LINE__)
#ifdef HG_WITH_CUDNN
#define HG_CUDNN_CHECK(expr) ::hg::cuda::detail::check_cudnn((expr), #expr, __FILE__, __LINE__)
#endif
// After a kernel launch: launch-configuration errors surface here, not at the next sync (and,
// with HG_CUDA_SYNC_DEBUG=1, errors raised while the kernel ran).
#define HG_CUDA_CHECK_LAUNCH() ::hg::cuda::detail::check_launch(__FILE__, __LINE__)
