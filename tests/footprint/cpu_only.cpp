// A CPU-only program does not pay for CUDA: after real CPU work (a few training steps) the process
// has not mapped cudart, cuBLASLt, cuDNN or the CUDA backend module, and prints its resident
// memory (VmRSS/VmHWM, the figures in docs/RELIABILITY.md). Then the loader itself:
//   cpu_only [--cuda-build]    first CUDA use (cuda::is_built) loads the backend, after which
//                              the module and cudart are mapped (a CUDA build must load it);
//   cpu_only --expect-missing  HG_CUDA_BACKEND names a missing or broken module: is_available()
//                              is false and a CUDA tensor throws hg::Error with the reason.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <halfgrad.h>

namespace {

int g_failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

// The mapped files whose path contains `name`, e.g. "libcudart".
bool mapped(const char* name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

std::string status_field(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field, 0) == 0) return line;
  return std::string(field) + " (not found)";
}

constexpr const char* kCudaLibs[] = {"libcudart", "libcublasLt", "libcudnn", "libhalfgrad_cuda"};

}  // namespace

int main(int argc, char** argv) {
  const bool cuda_build = argc > 1 && std::strcmp(argv[1], "--cuda-build") == 0;
  const bool expect_missing = argc > 1 && std::strcmp(argv[1], "--expect-missing") == 0;

  // CPU work: fit a line with a linear layer, autograd and SGD.
  hg::manual_seed(0);
  const hg::Tensor x = hg::rand({256, 1}) * 2.0 - 1.0;
  const hg::Tensor y = x * 3.0 - 2.0;
  hg::nn::Linear model(1, 1);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1});
  double loss_value = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    const hg::Tensor diff = model(x) - y;
    hg::Tensor loss = (diff * diff).mean();
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
  }
  check(loss_value < 1e-3, "CPU training converged (loss " + std::to_string(loss_value) + ")");
  for (const char* lib : kCudaLibs) check(!mapped(lib), std::string("CPU-only work did not map ") + lib);
  std::printf("after CPU work: %s, %s\n", status_field("VmRSS").c_str(), status_field("VmHWM").c_str());

  if (expect_missing) {
    check(!hg::cuda::is_built() && !hg::cuda::is_available(), "a missing/broken backend: not built, not available");
    const std::string why = hg::cuda::backend_error();
    std::printf("backend_error: %s\n", why.c_str());
    check(!why.empty(), "backend_error() says why");
    try {
      (void)hg::zeros({4}, hg::kCUDA);
      check(false, "a CUDA tensor without the backend throws");
    } catch (const hg::Error& e) {
      std::printf("CUDA tensor: %s\n", e.what());
      check(std::string(e.what()).find(why) != std::string::npos, "the CUDA error carries the loader's reason");
    }
  } else {
    // First CUDA use loads the backend; in a CUDA build that must work even without a GPU, and
    // then the libraries the check above looks for are mapped (so it can see them).
    const bool built = hg::cuda::is_built();
    std::printf("cuda::is_built() = %d, is_available() = %d%s%s\n", built, hg::cuda::is_available(),
                built ? "" : ", backend_error: ", hg::cuda::backend_error().c_str());
    if (cuda_build) check(built, "a CUDA build loads its backend on first CUDA use");
    if (built) {
      check(mapped("libhalfgrad_cuda"), "after first CUDA use libhalfgrad_cuda is mapped");
      check(mapped("libcudart"), "after first CUDA use libcudart is mapped");
    }
    std::printf("after loading the backend: %s, %s\n", status_field("VmRSS").c_str(), status_field("VmHWM").c_str());
  }
  std::printf("%s\n", g_failures == 0 ? "PASS" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}
