// Non-temporal ("streaming") stores for elementwise outputs too large to stay in cache: the
// result goes straight to memory instead of first reading each destination line into the cache
// (the read-for-ownership that makes a plain store cost a read plus a write).
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "framework/tensor.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace hg::cpu {

// The size of the last-level cache this thread's core uses: Linux's sysfs cache description
// (what lscpu prints), else sysconf, else 32 MiB. (In virtual machines sysconf can report the
// whole host's L3, ten times what one core sees.)
int64_t last_level_cache_bytes();

// Streaming pays when the call's operands together do not fit in the last-level cache: its
// result would be evicted before anyone reads it again anyway. When they fit, plain stores keep
// the result in cache for the next op (measured on a Zen 4 core with a 32 MiB L3: a 16 MiB
// float32 product is twice as fast streamed, while a bfloat16 negation of 8 MiB, whose 16 MiB
// of operands fit, is 1.7x slower streamed; docs/history/PERF.md, "Elementwise ops").
inline bool use_stream_stores(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  const auto bytes = [](const Tensor& t) { return t.numel() * static_cast<int64_t>(element_size(t.dtype())); };
  int64_t total = bytes(out);
  for (const Tensor* t : inputs) total += bytes(*t);
  return total >= last_level_cache_bytes();
}

// dst[0, bytes) = src[0, bytes): src is a small block in L1, dst is the output. Aligned parts of
// dst are written with the widest streaming store the build targets; the ends with memcpy.
inline void stream_copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
#if defined(__AVX512F__)
  constexpr size_t kVec = 64;
#elif defined(__AVX__)
  constexpr size_t kVec = 32;
#elif defined(__SSE2__)
  constexpr size_t kVec = 16;
#else
  constexpr size_t kVec = 0;
#endif
  if constexpr (kVec > 0) {
    const size_t head = (kVec - reinterpret_cast<uintptr_t>(d) % kVec) % kVec;
    if (bytes >= head + kVec) {
      std::memcpy(d, s, head);
      d += head;
      s += head;
      bytes -= head;
      for (; bytes >= kVec; bytes -= kVec, d += kVec, s += kVec) {
#if defined(__AVX512F__)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
#elif defined(__AVX__)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
#elif defined(__SSE2__)
        _mm_stream_si128(reinterpret_cast<__m128i*>(d), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
#endif
      }
    }
  }
  std::memcpy(d, s, bytes);
}

// Orders this thread's streaming stores before whatever it does next (they are weakly ordered):
// called at the end of each thread's share, before the pool reports the share done.
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace hg::cpu
