// Scratch buffers for CPU kernels, taken from the caching allocator (a training loop in its
// steady state makes no system allocations).
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/allocator.h"

namespace hg::cpu {

// An uninitialised array of n T's from the CPU caching allocator, released on scope exit.
template <class T>
class Workspace {
 public:
  explicit Workspace(int64_t n) : bytes_(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T)) {
    ptr_ = static_cast<T*>(get_allocator(kCPU)->allocate(bytes_, kCPU));
  }
  ~Workspace() { get_allocator(kCPU)->deallocate(ptr_, bytes_, kCPU); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  T* data() const { return ptr_; }

 private:
  size_t bytes_;
  T* ptr_ = nullptr;
};

}  // namespace hg::cpu
