// The CPU caching allocator: alignment, huge-page-sized blocks, reuse.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "framework/allocator.h"
#include "helpers.h"

using namespace hg;

TEST_CASE("cpu allocator: 64-byte alignment, 2 MiB alignment for blocks of 2 MiB and more, blocks reused") {
  const char* env = std::getenv("HG_CPU_HUGE_PAGES");
  const bool huge = env == nullptr || std::string_view(env) != "0";
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 19, (int64_t{1} << 19) + 5, int64_t{3} << 20}) {
    CAPTURE(n);
    const Tensor t = empty({n}, kFloat32);
    const auto address = reinterpret_cast<uintptr_t>(t.raw_data());
    CHECK(address % 64 == 0);
    // 4 bytes a value: from 2^19 values on, the block is 2 MiB or more.
    if (huge && n >= (int64_t{1} << 19)) CHECK(address % (uintptr_t{2} << 20) == 0);
  }
  // Freed blocks go back to the cache: the same sizes again ask the system for nothing.
  { const Tensor warm = empty({int64_t{3} << 20}, kFloat32); }
  const int64_t before = cpu_memory_stats().system_allocations;
  for (int i = 0; i < 3; ++i) {
    const Tensor t = empty({int64_t{3} << 20}, kFloat32);
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
  CHECK(cpu_memory_stats().system_allocations == before);
}
