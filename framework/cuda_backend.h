// Loading the CUDA backend: the module libhalfgrad_cuda.so (kernels/cuda) is opened with dlopen on
// first CUDA use, so a CPU-only program never maps cudart, cuBLASLt or cuDNN. Not installed: user
// code asks hg::cuda::is_built() and backend_error() (framework/cuda.h).
#pragma once

#include <string>

namespace hg::cuda {

// Opens the backend module once (thread-safe; later calls return the first answer). Its static
// initialisers install the CUDA allocator, the runtime hooks and the CUDA kernels. Looked for in
// $HG_CUDA_BACKEND if set, else next to libhalfgrad. Every cuda:: query, the first CUDA tensor
// and a CUDA kernel lookup call this, so user code need not. Returns whether it is loaded.
bool load_backend();

}  // namespace hg::cuda
