// The cuda suite. Without a CUDA build or a visible GPU it reports itself skipped (exit code 77,
// which meson counts as SKIP), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <halfgrad.h>

int main(int argc, char** argv) {
  if (!hg::cuda::is_built()) {
    std::puts("cuda suite: SKIPPED (halfgrad was built without CUDA support)");
    return 77;
  }
  if (!hg::cuda::is_available()) {
    std::puts("cuda suite: SKIPPED (CUDA build, but no CUDA device is visible)");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
