// The tiling of the CUDA flash-attention kernels (kernels/cuda/flash_attention.cu), shared with the
// CPU model of the same algorithm in tests/cpu/flash_reference.h so both cut the work the same way:
// blocks of kFlashRows query rows against tiles of kFlashCols keys, head dims padded up to a
// multiple of 32 (the kernels are instantiated for 32, 64, 96 and 128).
#pragma once

#include <cstdint>

namespace hg {

inline constexpr int64_t kFlashRows = 64;  // query rows per block (4 warps x 16 rows)
inline constexpr int64_t kFlashCols = 64;  // keys per tile
inline constexpr int64_t kFlashMaxHeadDim = 128;

// The padded head dim the kernels run max(E, Ev) in, or 0 when it is too large (or E is 0).
constexpr int64_t flash_head_dim(int64_t E, int64_t Ev) {
  const int64_t d = E > Ev ? E : Ev;
  if (E <= 0 || Ev <= 0 || d > kFlashMaxHeadDim) return 0;
  return (d + 31) / 32 * 32;
}

}  // namespace hg
