// The CUDA runtime: device queries, the caching allocator (reuse, statistics, out-of-memory),
// and the host-synchronisation counter.
#include "framework/dispatch.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("a CUDA build with a device reports it") {
  CHECK(cuda::is_built());
  CHECK(cuda::is_available());
  CHECK(cuda::device_count() >= 1);
  const Tensor t = ones({4}, kCUDA);
  CHECK(t.device() == Device(kCUDA, 0));
  CHECK(t.sum().item<float>() == 4.0f);
}

TEST_CASE("the caching allocator reuses freed blocks without asking the driver") {
  const auto start = cuda::memory_stats();
  { const Tensor t = empty({1 << 20}, kCUDA); }  // 4 MiB, returned to the cache
  const auto first = cuda::memory_stats();
  CHECK(first.allocated == start.allocated);
  CHECK(first.peak_allocated >= start.allocated + (int64_t{4} << 20));
  for (int i = 0; i < 5; ++i) {
    const Tensor t = empty({1 << 20}, kCUDA);
    CHECK(cuda::memory_stats().allocated >= start.allocated + (int64_t{4} << 20));
  }
  const auto again = cuda::memory_stats();
  CHECK(again.system_allocations == first.system_allocations);  // no new cudaMalloc
  CHECK(again.reserved == first.reserved);
  // A training-like loop in its steady state.
  const Tensor w = randn({64, 64}).to(kCUDA);
  Tensor x = randn({32, 64}).to(kCUDA);
  for (int i = 0; i < 2; ++i) x = relu(mm(x, w)) * 0.5;
  const auto warm = cuda::memory_stats();
  for (int i = 0; i < 10; ++i) x = relu(mm(x, w)) * 0.5;
  CHECK(cuda::memory_stats().system_allocations == warm.system_allocations);
  // empty_cache gives unused blocks back; tensors alive stay.
  cuda::empty_cache();
  const auto emptied = cuda::memory_stats();
  CHECK(emptied.reserved == emptied.allocated);
  CHECK(x.to(kCPU).numel() == 32 * 64);
}

TEST_CASE("out of memory is an hg::Error saying how much was asked for and how much is held") {
  const Tensor keep = empty({1 << 18}, kCUDA);
  check_error([] { (void)empty({int64_t{1} << 46}, kCUDA); },
              {"[allocate]", "CUDA out of memory", "asking for", "halfgrad holds", "cuda:0"});
  // The allocator still works afterwards.
  CHECK(ones({10}, kCUDA).sum().item<float>() == 10.0f);
}

TEST_CASE("device work makes no host synchronisation; reading a value makes one") {
  const Tensor a = randn({128, 128}).to(kCUDA);  // host-to-device: no wait
  const int64_t before = cuda::host_sync_count();
  Tensor y = relu(mm(a, a) + a) * 0.25;
  Tensor s = sum(y, {1});
  Tensor z = s.to(kFloat16).to(kFloat32);
  CHECK(cuda::host_sync_count() == before);
  (void)z.sum().item<float>();  // device-to-host copy
  CHECK(cuda::host_sync_count() == before + 1);
  cuda::synchronize();
  CHECK(cuda::host_sync_count() == before + 1 + cuda::device_count());
}

TEST_CASE("CUDA errors name the op and the devices") {
  const Tensor g = ones({3}, kCUDA), c = ones({3});
  check_error([&] { (void)mm(g.reshape({1, 3}), c.reshape({3, 1})); }, {"[mm]", "cuda:0", "cpu"});
  check_error([] { (void)empty({4}, Device(kCUDA, 999)); }, {"[allocate]", "999"});
}

TEST_CASE("every kernel stub with a CPU kernel has a CUDA kernel unless it is optional") {
  for (const DispatchStubBase* stub : stub_registry()) {
    CAPTURE(stub->name);
    if (stub->has(kCPU) && !stub->optional) CHECK_MESSAGE(stub->has(kCUDA), stub->name << " has no CUDA kernel");
  }
}
