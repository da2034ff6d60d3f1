// Threads: the CPU pool under back-to-back parallel jobs from several callers, autocast state per
// thread (and LIFO contexts), two models training at once, DataLoader workers. Run under
// ThreadSanitizer in CI.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/thread_pool.h"

#if defined(__linux__)
#include <sched.h>
#endif
#include "tests/cpu/helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("threads: back-to-back parallel ops from several threads give exact sums") {
  // Each op is big enough to be split over the pool; jobs follow each other with no pause, so a
  // worker leaving one job overlaps the next (where the old pool raced).
  const Tensor x = ones({1 << 16});
  std::atomic<int> wrong{0};
  auto body = [&] {
    for (int i = 0; i < 300; ++i)
      if (x.sum().item<double>() != double(1 << 16)) ++wrong;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back(body);
  body();
  for (auto& t : threads) t.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("threads: pool jobs after pauses shorter and longer than the workers' spin run each task once") {
  // Pauses of 0 to 3 ms between jobs: workers are caught while checking for work and after they
  // fell asleep; each task index must run exactly once, on whichever thread takes it.
  const int64_t n = 64;
  std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
  const int pauses_us[] = {0, 20, 150, 3000};
  int jobs = 0;
  for (int round = 0; round < 25; ++round) {
    for (const int pause : pauses_us) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause));
      hg::cpu::run_parallel(n, [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); });
      ++jobs;
    }
  }
  int wrong = 0;
  for (const auto& r : runs) wrong += r.load() != jobs;
  CHECK(wrong == 0);
}

#if defined(__linux__)
TEST_CASE("threads: each worker runs bound to a CPU of its own, and the calling thread stays unbound") {
  cpu_set_t before;
  CPU_ZERO(&before);
  REQUIRE(sched_getaffinity(0, sizeof(before), &before) == 0);
  const std::vector<int> cpus = hg::cpu::worker_cpus();
  if (cpus.empty()) {
    MESSAGE(
        "skipped: the workers are not bound here (one thread, HG_CPU_BIND=0, or fewer CPUs allowed than "
        "workers)");
    return;
  }
  CHECK(static_cast<int>(cpus.size()) == hg::cpu::num_threads() - 1);
  CHECK(std::set<int>(cpus.begin(), cpus.end()).size() == cpus.size());
  for (int c : cpus) CHECK(CPU_ISSET(c, &before));
  // The caller's task waits until a worker has taken one, so a worker's binding is always seen.
  const auto caller = std::this_thread::get_id();
  std::atomic<int> worker_tasks{0};
  std::mutex seen_mutex;
  std::vector<std::vector<int>> worker_masks;
  hg::cpu::run_parallel(2 * hg::cpu::num_threads(), [&](int64_t) {
    if (std::this_thread::get_id() == caller) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (worker_tasks.load() == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    cpu_set_t mask;
    CPU_ZERO(&mask);
    std::vector<int> in_mask;
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &mask)) in_mask.push_back(c);
    }
    {
      std::lock_guard lock(seen_mutex);
      worker_masks.push_back(in_mask);
    }
    worker_tasks.fetch_add(1);
  });
  REQUIRE(worker_tasks.load() > 0);
  for (const auto& m : worker_masks) {
    REQUIRE(m.size() == 1);  // bound to one CPU
    CHECK(std::find(cpus.begin(), cpus.end(), m[0]) != cpus.end());
  }
  cpu_set_t after;
  CPU_ZERO(&after);
  REQUIRE(sched_getaffinity(0, sizeof(after), &after) == 0);
  CHECK(CPU_EQUAL(&before, &after));  // the calling thread keeps the mask it had
}
#endif

TEST_CASE("threads: a task that throws fails its job with that error, and the pool keeps working") {
  for (const int pause_us : {0, 3000}) {
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(hg::cpu::run_parallel(8,
                                               [&](int64_t i) {
                                                 ran.fetch_add(1);
                                                 if (i == 5) throw std::runtime_error("task 5 failed");
                                               }),
                         "task 5 failed", std::runtime_error);
    // On the pool the other tasks still run (none skipped or run twice); inline, the loop stops.
    CHECK(ran.load() == (hg::cpu::num_threads() > 1 ? 8 : 6));
    std::atomic<int64_t> sum{0};
    hg::cpu::run_parallel(100, [&](int64_t i) { sum.fetch_add(i); });
    CHECK(sum.load() == 4950);
  }
}

TEST_CASE("threads: autocast state is per thread, and contexts unset out of order are refused") {
  std::atomic<bool> other_saw_enabled{true};
  {
    amp::AutocastGuard guard(kCPU, kBFloat16);
    std::thread t([&] { other_saw_enabled = amp::is_autocast_enabled(kCPU); });
    t.join();
    CHECK(amp::is_autocast_enabled(kCPU));
  }
  CHECK_FALSE(other_saw_enabled.load());

  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  amp::AutocastContext outer = amp::set_autocast(kCPU, kBFloat16);
  amp::AutocastContext inner = amp::set_autocast(kCPU, kFloat16, true, false);
  const int depth = amp::autocast_nesting_depth();
  check_error([&] { amp::unset_autocast(outer); }, {"[unset_autocast]", "reverse order"});
  // Refused without touching anything.
  CHECK(amp::autocast_nesting_depth() == depth);
  CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
  CHECK_FALSE(amp::is_autocast_cache_enabled(kCPU));
  CHECK(outer.active());
  // From another thread: refused too.
  std::thread t([&] { check_error([&] { amp::unset_autocast(inner); }, {"another thread"}); });
  t.join();
  CHECK(inner.active());
  amp::unset_autocast(inner);
  CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
  {
    amp::AutocastGuard guard(kCPU);  // a guard opened after a context must close first, too
    check_error([&] { amp::unset_autocast(outer); }, {"reverse order"});
  }
  amp::unset_autocast(outer);
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::autocast_nesting_depth() == 0);
}

TEST_CASE("threads: two models train on two threads, each as it would alone") {
  auto train = [](uint64_t seed, bool bf16) {
    nn::Sequential model{std::make_shared<nn::Linear>(16, 64), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(64, 4)};
    for (auto& p : model.parameters()) {
      NoGradGuard ng;
      p.copy_(full(p.shape(), 0.01 * static_cast<double>(seed % 7 + 1)));
    }
    optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    const Tensor x = (arange(0.0, 256.0 * 16, 1.0, TensorOptions(kFloat32)) * (2.0 / 4096) - 1.0).reshape({256, 16});
    std::vector<int64_t> labels(256);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 4);
    const Tensor y = tensor(labels, {256});
    double loss_value = 0;
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      amp::AutocastGuard guard(kCPU, kBFloat16, bf16);
      const Tensor loss = cross_entropy(model(x), y);
      loss.backward();
      opt.step();
      loss_value = loss.item<double>();
    }
    return loss_value;
  };
  const double alone_a = train(1, true), alone_b = train(2, false);
  double together_a = 0, together_b = 0;
  std::thread ta([&] { together_a = train(1, true); });
  std::thread tb([&] { together_b = train(2, false); });
  ta.join();
  tb.join();
  CHECK(together_a == alone_a);
  CHECK(together_b == alone_b);
}

TEST_CASE("threads: DataLoader workers run ops in their transform while the loop runs ops, and stop when dropped") {
  // The transform calls ops big enough for the CPU pool while the loop runs its own: the data
  // workers and the loop share the pool without deadlock, and the batches match a serial pass.
  const Tensor x = arange(double(24 * 4096), kFloat32).reshape({24, 4096});
  auto ds = data::map(data::TensorDataset{x, arange(int64_t{24})},
                      data::Compose{data::Lambda([](const Tensor& t) { return (t * 2).exp().log() - t; }),
                                    data::Normalize({1.0}, {2.0})});
  auto sums = [&](int workers, int64_t stop_after) {
    data::DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .seed = 3, .num_workers = workers});
    std::vector<double> out;
    for (TensorList b : loader) {
      out.push_back((b[0] * b[0]).sum().item<double>() + b[1].sum().item<double>());
      if (static_cast<int64_t>(out.size()) == stop_after) break;  // abandoned with workers busy
    }
    return out;
  };
  const auto serial = sums(0, -1);
  CHECK(serial.size() == 5);
  CHECK(sums(3, -1) == serial);
  CHECK(sums(2, 1) == std::vector<double>{serial[0]});
}

TEST_CASE("threads: backward passes on several threads sharing leaves accumulate the exact gradient") {
  // Separate graphs, one leaf and one module's parameters shared: each backward adds into the same
  // .grad (as PyTorch's AccumulateGrad, under the leaf's lock), while another thread reads .grad,
  // and hooks are registered and removed on the leaf; half the module's passes run under bf16
  // autocast. Every value is an integer, exact in bf16 too, so the sums are exact whatever order
  // the passes take.
  constexpr int kThreads = 4, kIters = 100;
  Tensor x = ones({4096}).requires_grad_();
  manual_seed(3);
  nn::Linear fc(8, 4);
  const Tensor input = ones({2, 8});
  std::atomic<int> post_hooks{0}, post_hooks_without_grad{0}, looks{0};
  x.register_post_accumulate_grad_hook([&](const Tensor& t) {
    post_hooks.fetch_add(1);
    if (!t.grad().defined()) post_hooks_without_grad.fetch_add(1);
  });
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  auto train = [&] {
    for (int i = 0; i < kIters; ++i) {
      (x * 2.0).sum().backward();
      if (i % 2 == 0) {
        fc(input).sum().backward();
      } else {  // the weights' autocast cast slot is shared too
        amp::AutocastGuard autocast(kCPU, kBFloat16);
        fc(input).sum().backward();
      }
    }
  };
  // Reads .grad while it is replaced: each snapshot is one whole gradient (all elements equal, an
  // even value no larger than the final one).
  auto read = [&] {
    while (!done.load()) {
      const Tensor g = x.grad();
      if (!g.defined()) continue;
      const std::vector<float> v = g.to_vector<float>();
      for (const float e : v)
        if (e != v[0] || static_cast<int>(e) % 2 != 0 || e > 2.0f * kThreads * kIters) ++torn;
    }
  };
  auto churn_hooks = [&] {
    while (!done.load()) {
      RemovableHandle h = x.register_hook([&](const Tensor&) { looks.fetch_add(1); });
      h.remove();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(train);
  std::thread reader(read), hooks(churn_hooks);
  for (auto& t : threads) t.join();
  done = true;
  reader.join();
  hooks.join();

  CHECK(torn.load() == 0);
  CHECK(post_hooks.load() == kThreads * kIters);
  CHECK(post_hooks_without_grad.load() == 0);
  const int n = kThreads * kIters;
  // d/dx sum(2x) = 2; for sum(input W^T + b) with two rows of ones: dW = 2, db = 2, per pass.
  CHECK(x.grad().to_vector<float>() == std::vector<float>(4096, 2.0f * n));
  CHECK(fc.weight.grad().to_vector<float>() == std::vector<float>(32, 2.0f * n));
  CHECK(fc.bias.grad().to_vector<float>() == std::vector<float>(4, 2.0f * n));
}
