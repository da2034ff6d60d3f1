// The CPU thread pool between serial work (docs/BENCHMARKS.md, "Elementwise ops"): a training
// step runs serial work (small ops, bookkeeping) between its parallel ones, and a pool worker
// must still be on a CPU of its own when the next parallel op arrives. Each burst is a stretch of
// serial work (busy for --gap-us) or of sleep (--sleep), then ten bfloat16 sqrt calls on 1M
// elements; prints the median call over the bursts, the first call after the gap apart.
// Run it twice, with and without HG_CPU_BIND=0, to see what binding the workers does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <halfgrad.h>

int main(int argc, char** argv) {
  int gap_us = 50, bursts = 40;
  bool sleep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sleep") {
      sleep = true;
    } else if (a == "--gap-us" && i + 1 < argc) {
      gap_us = std::atoi(argv[++i]);
    } else if (a == "--bursts" && i + 1 < argc) {
      bursts = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_pool [--gap-us N] [--sleep] [--bursts N]\n");
      return 2;
    }
  }
  const hg::Tensor x = (hg::randn({1 << 20}).abs() + 0.1).to(hg::kBFloat16);
  std::vector<double> first, rest;
  for (int b = 0; b < bursts; ++b) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(gap_us);
    if (sleep) {
      std::this_thread::sleep_until(until);
    } else {
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    for (int i = 0; i < 10; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const hg::Tensor y = hg::sqrt(x);
      (i == 0 ? first : rest)
          .push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::sort(first.begin(), first.end());
  std::sort(rest.begin(), rest.end());
  const char* threads = std::getenv("HG_NUM_THREADS");
  std::printf(
      "HG_NUM_THREADS %s, %s %d us between bursts: first call after the gap %.3f ms, the others %.3f ms "
      "(medians)\n",
      threads ? threads : "unset", sleep ? "sleep" : "serial work", gap_us, first[first.size() / 2],
      rest[rest.size() / 2]);
}
