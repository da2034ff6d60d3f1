// amp cast cache: once per weight per outermost region, per thread, only for leaf weights.
#include <thread>

#include "helpers.h"

using namespace hg;

namespace {
Tensor weight(const Shape& shape) { return randn(shape).requires_grad_(); }
}  // namespace

TEST_CASE("amp: a weight used twice in one region is cast once") {
  Tensor w = weight({4, 4}), x = randn({2, 4});
  OpRecorder rec;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    Tensor h = mm(x, w);  // casts x and w
    Tensor y = mm(h, w);  // w from the cache
    CHECK(y.dtype() == kBFloat16);
    CHECK(amp::cast_cache_size() == 1);
    {
      amp::AutocastGuard inner(kCPU, kBFloat16);  // a nested region shares the outer one's cache
      mm(h, w);
    }
    CHECK(amp::cast_cache_size() == 1);
  }
  CHECK(rec.count("to") == 2);
  CHECK(amp::cast_cache_size() == 0);  // cleared when the outermost region ends
  // The next region casts again.
  rec.clear();
  amp::with_autocast(kCPU, kBFloat16, [&] { return mm(mm(x, w), w); });
  CHECK(rec.count("to") == 2);
}

TEST_CASE("amp: cache_enabled=false casts on every use") {
  Tensor w = weight({4, 4}), x = randn({2, 4}, kBFloat16);
  OpRecorder rec;
  amp::AutocastGuard g(kCPU, kBFloat16, true, /*cache_enabled=*/false);
  mm(mm(x, w), w);
  CHECK(rec.count("to") == 2);
  CHECK(amp::cast_cache_size() == 0);
}

TEST_CASE("amp: casts under InferenceModeGuard are not cached") {
  Tensor w = weight({4, 4}), x = randn({2, 4}, kBFloat16);
  InferenceModeGuard inference;
  OpRecorder rec;
  amp::AutocastGuard g(kCPU, kBFloat16);
  mm(mm(x, w), w);
  CHECK(rec.count("to") == 2);
  CHECK(amp::cast_cache_size() == 0);
}

TEST_CASE("amp: only float32 leaf weights that own their storage are cached") {
  Tensor x = randn({2, 4}, kBFloat16);
  amp::AutocastGuard g(kCPU, kBFloat16);
  Tensor plain = randn({4, 4});  // does not require grad: an activation, not a weight
  mm(x, plain);
  CHECK(amp::cast_cache_size() == 0);
  Tensor w = weight({4, 4});
  Tensor non_leaf = w * 2.0;  // not a leaf
  mm(x, non_leaf);
  CHECK(amp::cast_cache_size() == 0);
  Tensor big = weight({8, 4});
  Tensor view_leaf = big.detach().slice(0, 0, 4).requires_grad_();  // a leaf that is a view
  mm(x, view_leaf);
  CHECK(amp::cast_cache_size() == 0);
  CHECK_FALSE(amp::is_cacheable(view_leaf, kBFloat16));
  CHECK(amp::is_cacheable(w, kBFloat16));
  CHECK_FALSE(amp::is_cacheable(w, kFloat32));  // only casts to the lower dtypes
  CHECK_FALSE(amp::is_cacheable(weight({2}).to(kFloat64).detach().requires_grad_(), kBFloat16));
}

TEST_CASE("amp: a weight changed in place inside the region is cast again") {
  Tensor w = weight({2, 2}), x = randn({1, 2}, kBFloat16);
  amp::AutocastGuard g(kCPU, kBFloat16);
  Tensor before = mm(x, w);
  {
    NoGradGuard ng;
    w.mul_(2.0);
  }
  Tensor after = mm(x, w);
  hg::test::check_close(after.to(kFloat32), (before * 2.0).to(kFloat32), hg::test::tolerance(kBFloat16));
}

TEST_CASE("amp: a cached cast first made under NoGradGuard still gives the weight a gradient") {
  Tensor w = weight({3, 3}), x = randn({2, 3});
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    {
      NoGradGuard ng;
      Tensor probe = mm(x, w);  // first cast of w happens here, without grad recording
      CHECK_FALSE(probe.requires_grad());
    }
    Tensor loss = mm(x, w).to(kFloat32).sum();  // reuses the cached cast
    CHECK(loss.requires_grad());
    loss.backward();
  }
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
  // d(sum(x w))/dw = x^T 1
  Tensor expected = mm(x.t(), ones({2, 3}));
  hg::test::check_close(w.grad(), expected, hg::test::tolerance(kBFloat16));
}

TEST_CASE("amp: the cache is per thread") {
  Tensor w = weight({2, 2}), x = randn({1, 2});
  amp::AutocastGuard g(kCPU, kBFloat16);
  mm(x, w);
  CHECK(amp::cast_cache_size() == 1);
  size_t other = 99;
  std::thread t([&] {
    amp::AutocastGuard inner(kCPU, kBFloat16);
    other = amp::cast_cache_size();
    mm(x, w);
    other += amp::cast_cache_size();
  });
  t.join();
  CHECK(other == 1);  // 0 before its own cast, 1 after
  CHECK(amp::cast_cache_size() == 1);
}
