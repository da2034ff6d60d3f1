// The CUDA runtime: device queries, the caching allocator (reuse, statistics, out-of-memory),
// the host-synchronisation counter, and pinned host memory (cuda::pin_memory, DataLoader).
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
  // empty_cache gives every wholly unused segment back; tensors alive stay, with the free rest of
  // a segment one of them was split from (block_cache.h).
  cuda::empty_cache();
  const auto emptied = cuda::memory_stats();
  CHECK(emptied.reserved >= emptied.allocated);
  CHECK(emptied.reserved <= warm.reserved);
  CHECK(x.to(kCPU).numel() == 32 * 64);
}

TEST_CASE("the caching allocator splits a large cached block and merges it back") {
  cuda::empty_cache();
  const auto start = cuda::memory_stats();
  { const Tensor big = empty({int64_t{48} << 20}, kCUDA); }  // 192 MiB, cached when freed
  const auto cached = cuda::memory_stats();
  CHECK(cached.system_allocations == start.system_allocations + 1);
  {
    // 120 MiB and 60 MiB are cut from the cached 192 MiB: no cudaMalloc, nothing more reserved.
    const Tensor a = empty({int64_t{30} << 20}, kCUDA);
    const Tensor b = empty({int64_t{15} << 20}, kCUDA);
    CHECK(cuda::memory_stats().system_allocations == cached.system_allocations);
    CHECK(cuda::memory_stats().reserved == cached.reserved);
  }
  // Freed, the pieces merge back: the whole 192 MiB serves again.
  const Tensor whole = empty({int64_t{48} << 20}, kCUDA);
  CHECK(cuda::memory_stats().system_allocations == cached.system_allocations);
  CHECK(cuda::memory_stats().reserved == cached.reserved);
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

TEST_CASE("pinned host memory: pin_memory copies, copies to the device match, freed blocks come back") {
  const Tensor x = arange(1000.0, kFloat32).reshape({10, 100});
  CHECK_FALSE(cuda::is_pinned(x));
  const Tensor p = cuda::pin_memory(x.t());  // non-contiguous input: a contiguous pinned copy
  CHECK(cuda::is_pinned(p));
  CHECK(p.device().is_cpu());
  CHECK(p.is_contiguous());
  CHECK(p.to_vector<float>() == x.t().contiguous().to_vector<float>());
  CHECK(cuda::pin_memory(p).storage() == p.storage());  // already pinned: itself
  // The copy to the device returns before reading the host block; the block is freed at once and
  // must not be handed out again until that copy has finished.
  Tensor d;
  {
    const Tensor q = cuda::pin_memory(x);
    d = q.to(kCUDA);
  }
  const Tensor reuse = cuda::pin_memory(zeros({10, 100}));  // same size: may take the freed block
  CHECK(d.to(kCPU).to_vector<float>() == x.to_vector<float>());
  CHECK(reuse.sum().item<float>() == 0.0f);
  check_error([] { cuda::pin_memory(ones({2}, kCUDA)); }, {"[pin_memory]", "CPU tensor"});

  // A DataLoader with pin_memory hands out pinned batches, the same as without.
  auto ds = std::make_shared<data::TensorDataset>(TensorList{x, arange(int64_t{10})});
  data::DataLoader plain(ds, {.batch_size = 4, .shuffle = true, .seed = 2});
  data::DataLoader pinned(ds, {.batch_size = 4, .shuffle = true, .seed = 2, .num_workers = 2, .pin_memory = true});
  auto it = plain.begin();
  for (TensorList b : pinned) {
    const TensorList ref = *it;
    ++it;
    CHECK(cuda::is_pinned(b[0]));
    CHECK(cuda::is_pinned(b[1]));
    CHECK(b[0].to(kCUDA).to(kCPU).to_vector<float>() == ref[0].to_vector<float>());
    CHECK(b[1].to_vector<int64_t>() == ref[1].to_vector<int64_t>());
  }
}
