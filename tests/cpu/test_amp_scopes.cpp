// amp scopes: the contract, the seed examples, nesting, restore, errors, threads.
#include <thread>

#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("amp: the autocast contract compiles and runs as written") {
  namespace amp = hg::amp;
  hg::Tensor a = hg::randn({4, 3}), b = hg::randn({3, 2});
  {
    amp::AutocastGuard g(hg::kCPU, hg::kBFloat16);
    CHECK(hg::mm(a, b).dtype() == hg::kBFloat16);
  }
  {
    amp::AutocastGuard g(hg::kCPU);
    CHECK(amp::get_autocast_dtype(hg::kCPU) == hg::kBFloat16);
  }
  {
    amp::AutocastGuard off(hg::kCPU, hg::kBFloat16, /*enabled=*/false);
    CHECK(hg::mm(a, b).dtype() == hg::kFloat32);
  }
  {
    amp::AutocastGuard g(hg::kCPU, hg::kBFloat16, true, /*cache_enabled=*/false);
    CHECK_FALSE(amp::is_autocast_cache_enabled(hg::kCPU));
  }
  hg::Tensor y = amp::with_autocast(hg::kCPU, hg::kBFloat16, [&] { return hg::mm(a, b); });
  CHECK(y.dtype() == hg::kBFloat16);
  amp::AutocastContext ctx = amp::set_autocast(hg::kCPU, hg::kBFloat16);
  CHECK(amp::is_autocast_enabled(hg::kCPU));
  amp::unset_autocast(ctx);
  bool on = amp::is_autocast_enabled(hg::kCPU);
  CHECK_FALSE(on);
  hg::Dtype dt = amp::get_autocast_dtype(hg::kCPU);
  CHECK(dt == hg::kBFloat16);
  auto f = amp::autocast_fn(hg::kCPU, hg::kBFloat16, [](hg::Tensor a, hg::Tensor b) { return hg::mm(a, b); });
  CHECK(f(a, b).dtype() == hg::kBFloat16);
  CHECK(hg::mm(a, b).dtype() == hg::kFloat32);
}

TEST_CASE("amp: seed example, mm in a region gives the lower dtype and mixed inputs are handled") {
  Tensor a = randn({5, 5}), b = randn({5, 5}), c = randn({5, 5}), d = randn({5, 5});
  Tensor e, f;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    e = mm(a, b);
    CHECK(e.dtype() == kBFloat16);
    f = mm(d, e);  // float32 next to bfloat16: both run in bfloat16
    CHECK(f.dtype() == kBFloat16);
    Tensor z = mm(c, c.to(kBFloat16));
    CHECK(z.dtype() == kBFloat16);
  }
  // Outside the region, a bfloat16 result next to a float32 tensor is a clear dtype error.
  check_error([&] { mm(e, d); }, {"[mm]", "same dtype", "bfloat16", "float32", "autocast"});
  CHECK(mm(e.to(kFloat32), d).dtype() == kFloat32);
}

TEST_CASE("amp: seed example, a disabled sub-region runs in float32 and re-entering casts again") {
  Tensor a = randn({4, 4}), b = randn({4, 4});
  amp::AutocastGuard outer(kCPU, kBFloat16);
  Tensor e = mm(a, b);
  CHECK(e.dtype() == kBFloat16);
  {
    amp::AutocastGuard off(kCPU, kBFloat16, false);
    CHECK_FALSE(amp::is_autocast_enabled(kCPU));
    Tensor g = mm(a, e.to(kFloat32));
    CHECK(g.dtype() == kFloat32);
    {
      amp::AutocastGuard again(kCPU, kBFloat16);
      CHECK(mm(a, g).dtype() == kBFloat16);
    }
    CHECK(mm(a, b).dtype() == kFloat32);
  }
  CHECK(amp::is_autocast_enabled(kCPU));
  CHECK(mm(a, b).dtype() == kBFloat16);
}

TEST_CASE("amp: leaving a region restores enabled, dtype and cache_enabled, and counts nesting") {
  CHECK(amp::autocast_nesting_depth() == 0);
  {
    amp::AutocastGuard outer(kCPU, kFloat16, true, false);
    CHECK(amp::autocast_nesting_depth() == 1);
    {
      amp::AutocastGuard inner(kCPU, kBFloat16, false, true);
      CHECK(amp::autocast_nesting_depth() == 2);
      CHECK_FALSE(amp::is_autocast_enabled(kCPU));
      CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
      CHECK(amp::is_autocast_cache_enabled(kCPU));
    }
    CHECK(amp::is_autocast_enabled(kCPU));
    CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
    CHECK_FALSE(amp::is_autocast_cache_enabled(kCPU));
    // set/unset restores cache_enabled too (R torch forgets it).
    amp::AutocastContext ctx = amp::set_autocast(kCPU, kBFloat16, true, true);
    CHECK(amp::is_autocast_cache_enabled(kCPU));
    CHECK(amp::autocast_nesting_depth() == 2);
    amp::unset_autocast(ctx);
    CHECK_FALSE(amp::is_autocast_cache_enabled(kCPU));
    CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
    check_error([&] { amp::unset_autocast(ctx); }, {"[unset_autocast]", "already unset"});
  }
  CHECK(amp::autocast_nesting_depth() == 0);
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
  CHECK(amp::is_autocast_cache_enabled(kCPU));
}

TEST_CASE("amp: enabled is a runtime value and a scope object can be entered many times, nested") {
  Tensor a = randn({2, 2});
  for (bool use_amp : {true, false}) {
    amp::AutocastGuard g(kCPU, kBFloat16, use_amp);
    CHECK(mm(a, a).dtype() == (use_amp ? kBFloat16 : kFloat32));
  }
  const amp::AutocastScope scope{.device = kCPU, .dtype = kBFloat16};
  {
    amp::AutocastGuard first(scope);
    amp::AutocastGuard second(scope);
    CHECK(amp::autocast_nesting_depth() == 2);
  }
  CHECK(amp::with_autocast(scope, [&] { return mm(a, a); }).dtype() == kBFloat16);
  // The wrapper calls itself recursively: each call is its own nested region.
  std::function<int(int)> depth_at;
  auto wrapped =
      amp::autocast_fn(scope, [&](int n) { return n == 0 ? amp::autocast_nesting_depth() : depth_at(n - 1); });
  depth_at = wrapped;
  CHECK(wrapped(2) == 3);
  CHECK(amp::autocast_nesting_depth() == 0);
}

TEST_CASE("amp: with_autocast ends its region when the function throws") {
  check_error([] { amp::with_autocast(kCPU, kBFloat16, []() -> int { fail("user", "boom"); }); }, {"boom"});
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::autocast_nesting_depth() == 0);
}

TEST_CASE("amp: unsupported dtypes are rejected and cuda without a device stays off") {
  check_error([] { amp::AutocastGuard g(kCPU, kFloat32); }, {"[autocast]", "float16 and bfloat16", "float32"});
  check_error([] { amp::AutocastGuard g(kCPU, kFloat64, false); }, {"[autocast]", "float64"});
  check_error([] { amp::set_autocast(kCUDA, kInt32); }, {"[autocast]", "int32"});
  CHECK(amp::autocast_nesting_depth() == 0);
  CHECK(amp::default_autocast_dtype(kCUDA) == kFloat16);
  // The cpu suite also runs on GPU machines as a baseline: the "stays off" half only holds
  // without a device (tests/cuda/test_amp_optim.cpp checks that it turns on with one).
  if (!cuda::is_available()) {
    amp::AutocastGuard g(kCUDA);  // warns once on stderr, stays off
    CHECK_FALSE(amp::is_autocast_enabled(kCUDA));
    CHECK(amp::get_autocast_dtype(kCUDA) == kFloat16);
    amp::AutocastGuard again(kCUDA, kBFloat16);
    CHECK_FALSE(amp::is_autocast_enabled(kCUDA));
  } else {
    amp::AutocastGuard g(kCUDA, kBFloat16);
    CHECK(amp::is_autocast_enabled(kCUDA));
    CHECK(amp::get_autocast_dtype(kCUDA) == kBFloat16);
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCUDA));
  CHECK(amp::get_autocast_dtype(kCUDA) == kFloat16);
}

TEST_CASE("amp: a region in one thread does not affect another") {
  Tensor a = randn({3, 3});
  amp::AutocastGuard g(kCPU, kBFloat16);
  Dtype other_thread = kBool;
  bool other_enabled = true;
  std::thread t([&] {
    other_enabled = amp::is_autocast_enabled(kCPU);
    other_thread = mm(a, a).dtype();
  });
  t.join();
  CHECK_FALSE(other_enabled);
  CHECK(other_thread == kFloat32);
  CHECK(mm(a, a).dtype() == kBFloat16);
  // And a region opened on another thread leaves this one as it was.
  amp::AutocastGuard off(kCPU, kBFloat16, false);
  std::thread u([&] {
    amp::AutocastGuard inner(kCPU, kFloat16);
    other_thread = mm(a, a).dtype();
  });
  u.join();
  CHECK(other_thread == kFloat16);
  CHECK(mm(a, a).dtype() == kFloat32);
}
