// What the oneDNN kernels (matmul, convolution) share: the CPU engine and a stream per thread,
// per-thread buffers, the cache their primitives are kept in, and
// the guard that keeps oneDNN's OpenMP team at one thread. Included only where HG_HAVE_ONEDNN is
// set.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>

namespace hg::cpu {

inline const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The calling thread's stream on cpu_engine().
inline dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// oneDNN runs on OpenMP (Debian's build uses libgomp). OpenMP workers spin while they wait,
// and on a machine whose cores are all busy (halfgrad's pool, other processes) that spinning
// made a bfloat16 MLP step 10x slower. So while it calls oneDNN a thread asks for a team of
// one, and halfgrad splits the work over its own pool instead. The thread's previous setting
// comes back afterwards: a user's own OpenMP regions on that thread keep their team size.
class OneOpenMPThread {
 public:
  OneOpenMPThread() : previous_(omp_get_max_threads()) {
    if (previous_ != 1) omp_set_num_threads(1);
  }
  ~OneOpenMPThread() {
    if (previous_ != 1) omp_set_num_threads(previous_);
  }
  OneOpenMPThread(const OneOpenMPThread&) = delete;
  OneOpenMPThread& operator=(const OneOpenMPThread&) = delete;

 private:
  int previous_;
};

// A per-thread buffer that only grows (scratch memory, reordered chunks), so a training loop's
// steady state allocates nothing. 64-byte aligned, as tensors are: oneDNN's kernels load and store
// whole cache lines.
class GrowBuffer {
 public:
  GrowBuffer() = default;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;
  ~GrowBuffer() { std::free(data_); }
  // At least `bytes` bytes; the contents are not kept when it grows.
  char* sized(size_t bytes) {
    if (bytes <= size_) return data_;
    std::free(data_);
    data_ = static_cast<char*>(std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
    size_ = 0;
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = bytes;
    return data_;
  }

 private:
  static constexpr size_t kAlign = 64;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// Primitives (and what goes with them) made once per problem and kept, behind a mutex: a
// training loop runs the same handful of shapes on every step, and making one costs about a
// millisecond. A program that keeps making new shapes starts the cache afresh now and then
// (entries in use stay alive through their shared_ptr). Every entry is made under
// OneOpenMPThread: oneDNN fixes a primitive's OpenMP team size when it is made, not when it runs
// (a reorder made on a two-thread setting opened a two-thread team on every call, from inside
// halfgrad's pool, and the spinning worker halved a bfloat16 weight gradient's speed).
template <class Key, class Value>
class PrimitiveCache {
 public:
  // The entry for key, made by make() (returning a shared_ptr to a Value) the first time.
  template <class Make>
  std::shared_ptr<const Value> get(const Key& key, Make make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (entries_.size() >= kMaxEntries) entries_.clear();
      const OneOpenMPThread one_thread;
      it = entries_.emplace(key, make()).first;
    }
    return it->second;
  }

 private:
  static constexpr size_t kMaxEntries = 1024;
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<const Value>> entries_;
};

}  // namespace hg::cpu
