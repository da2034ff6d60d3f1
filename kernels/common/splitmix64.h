// SplitMix64, the counter-based generator behind dropout masks (and attention's dropout): the
// draw for element i is splitmix64(seed + i), so a mask is the same however the work is split
// across threads, and the same on the CPU and on CUDA.
#pragma once

#include <cstdint>

#include "framework/half.h"  // HG_HOST_DEVICE

namespace hg {

HG_HOST_DEVICE inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace hg
