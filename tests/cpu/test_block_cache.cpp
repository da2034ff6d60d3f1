// The CUDA caching allocator's bookkeeping (kernels/cuda/block_cache.h, pure host logic) on
// made-up addresses: large blocks split to fit and merge back, small ones only reuse their own
// size, pools and streams never mix, wholly free segments go back, graph pools are retagged.
#include "kernels/cuda/block_cache.h"

#include "helpers.h"

using hg::cuda::BlockCache;

namespace {

constexpr size_t kMiB = size_t{1} << 20;
const void* const kStream = reinterpret_cast<const void*>(0x51);
const void* const kOtherStream = reinterpret_cast<const void*>(0x52);

}  // namespace

TEST_CASE("block cache: a GB-sized request takes part of a larger cached block, the rest serves others") {
  BlockCache c;
  const uintptr_t base = 0x100000000;
  c.add_segment(base, 1536 * kMiB, 0, kStream);  // 1.5 GiB from the driver
  CHECK(c.release(base, 0) == 1536 * kMiB);
  // 1 GiB + 3 bytes: rounded to 512 bytes, split off the front; the 512 MiB rest stays cached.
  const uintptr_t a = c.take(0, kStream, 1024 * kMiB + 3);
  CHECK(a == base);
  CHECK(c.block_size(a) == 1024 * kMiB + 512);
  CHECK(c.free_block_count() == 1);
  const uintptr_t b = c.take(0, kStream, 300 * kMiB);
  CHECK(b == base + 1024 * kMiB + 512);
  CHECK(c.block_size(b) == 300 * kMiB);
  // What is left (212 MiB - 512 bytes) is split off as well; a request larger than it finds nothing.
  CHECK(c.take(0, kStream, 400 * kMiB) == 0);
  CHECK(c.segment_count() == 1);
  // Freed in either order, the three merge back into the one segment, which then goes back whole.
  CHECK(c.release(a, 0) == 1024 * kMiB + 512);
  CHECK(c.take_free_segments(0).empty());  // b is still in use
  CHECK(c.release(b, 0) == 300 * kMiB);
  CHECK(c.free_block_count() == 1);
  const auto freed = c.take_free_segments(0);
  REQUIRE(freed.size() == 1);
  CHECK(freed[0] == std::pair<uintptr_t, size_t>{base, 1536 * kMiB});
  CHECK(c.segment_count() == 0);
}

TEST_CASE("block cache: best fit, no split below kMinSplit, small blocks reuse their own size only") {
  BlockCache c;
  c.add_segment(0x1000000, 64 * kMiB, 0, kStream);
  c.add_segment(0x9000000, 40 * kMiB, 0, kStream);
  c.release(0x1000000, 0);
  c.release(0x9000000, 0);
  // 39.5 MiB: the 40 MiB block fits best; the 0.5 MiB rest is under kMinSplit, so it is not split.
  const uintptr_t a = c.take(0, kStream, 39 * kMiB + kMiB / 2);
  CHECK(a == 0x9000000);
  CHECK(c.block_size(a) == 40 * kMiB);
  // Small requests: 4096 bytes never take a slice of a large block.
  CHECK(c.take(0, kStream, 4096) == 0);
  c.add_segment(0x20000000, 4096, 0, kStream);
  c.release(0x20000000, 0);
  CHECK(c.take(0, kStream, 3000) == 0);  // rounds to 3072: not its own size
  CHECK(c.take(0, kStream, 4000) == 0x20000000);
  CHECK(BlockCache::round(1) == 512);
  CHECK(BlockCache::round(513) == 1024);
  CHECK(BlockCache::round(kMiB + 1) == kMiB + 512);
}

TEST_CASE("block cache: pools and streams never share blocks; merges stay within a pool") {
  BlockCache c;
  c.add_segment(0x1000000, 8 * kMiB, 0, kStream);
  c.release(0x1000000, 0);
  CHECK(c.take(7, kStream, 2 * kMiB) == 0);       // a graph's pool does not take ordinary blocks
  CHECK(c.take(0, kOtherStream, 2 * kMiB) == 0);  // nor another stream
  const uintptr_t a = c.take(0, kStream, 2 * kMiB);
  const uintptr_t b = c.take(0, kStream, 2 * kMiB);
  CHECK(b == a + 2 * kMiB);
  // a is freed while a capture (pool 7) records: it joins pool 7 and does not merge with pool 0's rest.
  c.release(a, 7);
  CHECK(c.block_pool(a) == 7);
  CHECK(c.pool_bytes(7) == static_cast<int64_t>(2 * kMiB));
  CHECK(c.take(0, kStream, 2 * kMiB) == b + 2 * kMiB);  // pool 0 gets the rest, not a
  CHECK(c.take(7, kStream, 2 * kMiB) == a);
  c.release(a, 7);
  // The graph goes: its blocks return to pool 0 and merge with their free neighbours.
  c.release(b, 0);
  c.retag(7, 0);
  CHECK(c.pool_bytes(7) == 0);
  CHECK(c.take_free_segments(0).empty());  // b + 2 MiB .. b + 4 MiB is still in use
  c.release(b + 2 * kMiB, 0);
  CHECK(c.take_free_segments(0).size() == 1);
}

TEST_CASE("block cache: a graph's own segments go back whole, and unknown addresses are ignored") {
  BlockCache c;
  c.add_segment(0x4000000, 16 * kMiB, 3, kStream);  // allocated during capture 3
  c.add_segment(0x8000000, 4 * kMiB, 0, kStream);
  CHECK(c.release(0x4000000, 3) == 16 * kMiB);
  CHECK(c.release(0x4000000, 3) == 0);  // twice: not in use any more
  CHECK(c.release(0x1234, 0) == 0);
  CHECK(c.block_size(0x1234) == 0);
  const auto freed = c.take_free_segments(3);
  REQUIRE(freed.size() == 1);
  CHECK(freed[0].first == 0x4000000);
  CHECK(c.take_free_segments(0).empty());  // 0x8000000 is in use
  CHECK(c.pool_bytes(0) == static_cast<int64_t>(4 * kMiB));
}
