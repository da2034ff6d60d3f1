// amp_bench --kernels: microbenchmarks of the kernels under the training steps (a square GEMM
// next to OpenBLAS, the MNIST CNN's conv layers), printed one line each.
#pragma once

#include <cstdio>

#include "options.h"

namespace amp_bench {

// Prints the GEMM and conv lines to `out`; returns the process exit code.
int run_kernels(std::FILE* out, const Options& options);

}  // namespace amp_bench
