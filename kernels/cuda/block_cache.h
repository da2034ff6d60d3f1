// The caching allocator's bookkeeping as pure host logic (no CUDA): segments from the driver,
// large ones split on demand and merged again when their neighbours come back, free blocks kept per
// (pool, stream, size). kernels/cuda/allocator.cu wraps it with cudaMalloc/cudaFree under its
// mutex; tests/cpu/test_block_cache.cpp drives it with made-up addresses.
//
// Sizes: a request under kSmallLimit is rounded to 512 bytes and reuses only blocks of exactly its
// size (its own segment otherwise); a large one is rounded to 512 bytes and takes the smallest free
// block of its pool and stream that fits, splitting off the rest when the rest is kMinSplit or more.
// So a large tensor wastes less than kMinSplit (a GB-sized one, under 0.1%), where rounding to
// classes with slack once wasted up to a third.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace hg::cuda {

class BlockCache {
 public:
  static constexpr size_t kSmallLimit = size_t{1} << 20;
  static constexpr size_t kMinSplit = size_t{1} << 20;

  static size_t round(size_t n) { return n <= 512 ? 512 : (n + 511) & ~size_t{511}; }

  // A free block of `pool` and `stream` for a request of round(n) bytes, now in use; 0 when none
  // fits. Returns the block's address; block_size() says how large it is.
  uintptr_t take(uint64_t pool, const void* stream, size_t n) {
    const size_t size = round(n);
    auto it = free_.lower_bound(FreeKey{pool, stream, size, 0});
    if (it == free_.end() || it->pool != pool || it->stream != stream) return 0;
    if (size < kSmallLimit && it->size != size) return 0;  // small blocks: their own size only
    const uintptr_t addr = it->addr;
    free_.erase(it);
    Block& b = blocks_.at(addr);
    b.free = false;
    if (size >= kSmallLimit && b.size - size >= kMinSplit) {
      const Block rest{b.segment, b.size - size, b.pool, b.stream, true};
      b.size = size;
      blocks_.emplace(addr + size, rest);
      free_.insert(key(addr + size, rest));
    }
    return addr;
  }

  // A new segment from the driver of round(n) bytes at `addr`, wholly used by one block.
  void add_segment(uintptr_t addr, size_t n, uint64_t pool, const void* stream) {
    const size_t size = round(n);
    segments_.emplace(addr, size);
    blocks_.emplace(addr, Block{addr, size, pool, stream, false});
  }

  // Returns the block in use at `addr` to the cache, in `pool` (its own, or a capture's that
  // takes it over), merged with free neighbours of its segment, pool and stream. Returns the
  // block's size, 0 when `addr` is no block in use.
  size_t release(uintptr_t addr, uint64_t pool) {
    auto it = blocks_.find(addr);
    if (it == blocks_.end() || it->second.free) return 0;
    const size_t size = it->second.size;
    it->second.free = true;
    it->second.pool = pool;
    insert_merged(it);
    return size;
  }

  // The size of the block in use at `addr` (0 when there is none).
  size_t block_size(uintptr_t addr) const {
    const auto it = blocks_.find(addr);
    return it == blocks_.end() || it->second.free ? 0 : it->second.size;
  }
  uint64_t block_pool(uintptr_t addr) const {
    const auto it = blocks_.find(addr);
    return it == blocks_.end() ? 0 : it->second.pool;
  }

  // Every block of pool `from` (in use or free) moves to pool `to`; free ones merge anew.
  void retag(uint64_t from, uint64_t to) {
    std::vector<uintptr_t> freed;
    for (auto& [addr, b] : blocks_) {
      if (b.pool != from) continue;
      if (b.free) {
        free_.erase(key(addr, b));
        freed.push_back(addr);
      }
      b.pool = to;
    }
    for (const uintptr_t addr : freed) {
      const auto it = blocks_.find(addr);
      if (it != blocks_.end() && it->second.free && !free_.contains(key(addr, it->second))) insert_merged(it);
    }
  }

  // Removes the segments of `pool` that are wholly free and returns them (address, bytes) for the
  // caller to give back to the driver.
  std::vector<std::pair<uintptr_t, size_t>> take_free_segments(uint64_t pool) {
    std::vector<std::pair<uintptr_t, size_t>> out;
    for (auto it = free_.begin(); it != free_.end();) {
      const auto seg = segments_.find(it->addr);
      if (it->pool != pool || seg == segments_.end() || seg->second != it->size) {
        ++it;
        continue;
      }
      out.emplace_back(it->addr, it->size);
      blocks_.erase(it->addr);
      segments_.erase(seg);
      it = free_.erase(it);
    }
    return out;
  }

  // Bytes of the blocks (in use and free) tagged with `pool`.
  int64_t pool_bytes(uint64_t pool) const {
    int64_t bytes = 0;
    for (const auto& entry : blocks_)
      if (entry.second.pool == pool) bytes += static_cast<int64_t>(entry.second.size);
    return bytes;
  }
  size_t segment_count() const { return segments_.size(); }
  size_t free_block_count() const { return free_.size(); }

 private:
  struct Block {
    uintptr_t segment;
    size_t size;
    uint64_t pool;
    const void* stream;
    bool free;
  };
  // Best fit: ordered by pool, stream, then size, then address.
  struct FreeKey {
    uint64_t pool;
    const void* stream;
    size_t size;
    uintptr_t addr;
    auto operator<=>(const FreeKey&) const = default;
  };
  using Blocks = std::map<uintptr_t, Block>;

  static FreeKey key(uintptr_t addr, const Block& b) { return FreeKey{b.pool, b.stream, b.size, addr}; }
  static bool joins(const Block& a, const Block& b) {
    return a.free && b.free && a.segment == b.segment && a.pool == b.pool && a.stream == b.stream;
  }

  // `it` is free and not in free_: merge it with free neighbours of its segment, pool and stream,
  // then index the result.
  void insert_merged(Blocks::iterator it) {
    if (auto next = std::next(it); next != blocks_.end() && joins(it->second, next->second)) {
      free_.erase(key(next->first, next->second));
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (joins(prev->second, it->second)) {
        free_.erase(key(prev->first, prev->second));
        prev->second.size += it->second.size;
        blocks_.erase(it);
        it = prev;
      }
    }
    free_.insert(key(it->first, it->second));
  }

  std::map<uintptr_t, size_t> segments_;  // base address -> bytes from the driver
  Blocks blocks_;                         // every block of every segment, by address
  std::set<FreeKey> free_;                // the free blocks
};

}  // namespace hg::cuda
