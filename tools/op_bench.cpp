// op_bench: the two kernels a transformer step lives on, timed alone on one device: square
// matrix products (mm) per dtype and size, and scaled_dot_product_attention forward and
// forward+backward. Prints one JSON document; tools/op_bench_torch.py prints the same for
// torch.matmul and F.scaled_dot_product_attention, and tools/gpu-perf.sh sets them side by side.
//   build/tools/op_bench --device cuda --mm-sizes 4096,8192 --dtypes bf16,fp16,tf32
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace {

struct Settings {
  std::string device = "cpu";
  std::vector<int64_t> mm_sizes = {1024};
  std::vector<std::string> dtypes = {"fp32", "bf16"};
  std::vector<int64_t> sdpa = {2, 4, 256, 64};  // B, H, T, D
  std::vector<std::string> sdpa_dtypes = {"bf16"};
  bool causal = true;
  int warmup = 3, iters = 10;
};

hg::Dtype dtype_of(const std::string& name) {
  if (name == "bf16") return hg::kBFloat16;
  if (name == "fp16") return hg::kFloat16;
  return hg::kFloat32;  // fp32, tf32
}

// Median milliseconds of `iters` calls after `warmup`, each call finished on the device.
double median_ms(const Settings& s, const std::function<void()>& call) {
  const bool cuda = s.device == "cuda";
  std::vector<double> ms;
  for (int i = 0; i < s.warmup + s.iters; ++i) {
    if (cuda) hg::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    if (cuda) hg::cuda::synchronize();
    if (i >= s.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

nlohmann::json bench_mm(const Settings& s, hg::Device device) {
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& name : s.dtypes) {
    if (s.device == "cuda") hg::set_allow_tf32(name == "tf32");
    if (name == "tf32" && s.device != "cuda") continue;
    for (const int64_t n : s.mm_sizes) {
      hg::NoGradGuard no_grad;
      const hg::Tensor a = hg::randn({n, n}).to(dtype_of(name)).to(device);
      const hg::Tensor b = hg::randn({n, n}).to(dtype_of(name)).to(device);
      const double ms = median_ms(s, [&] { (void)hg::mm(a, b); });
      const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
      rows.push_back({{"op", "mm"}, {"dtype", name}, {"n", n}, {"ms", ms}, {"tflops", flops / (ms * 1e9)}});
    }
  }
  if (s.device == "cuda") hg::set_allow_tf32(false);
  return rows;
}

nlohmann::json bench_sdpa(const Settings& s, hg::Device device) {
  nlohmann::json rows = nlohmann::json::array();
  const int64_t B = s.sdpa[0], H = s.sdpa[1], T = s.sdpa[2], D = s.sdpa[3];
  // FlashAttention's count: 4 B H T^2 D for the two products forward (half of it causal), the
  // backward 2.5 times that.
  const double forward_flops = 4.0 * B * H * static_cast<double>(T) * T * D / (s.causal ? 2.0 : 1.0);
  for (const std::string& name : s.sdpa_dtypes) {
    const hg::Dtype dt = dtype_of(name);
    auto make = [&] { return hg::randn({B, H, T, D}).to(dt).to(device).requires_grad_(); };
    const hg::Tensor q = make(), k = make(), v = make();
    const hg::Tensor grad = hg::randn({B, H, T, D}).to(dt).to(device);
    double fwd = 0;
    {
      hg::NoGradGuard no_grad;
      fwd = median_ms(s, [&] { (void)hg::scaled_dot_product_attention(q, k, v, {}, 0.0, s.causal); });
    }
    const double both =
        median_ms(s, [&] { hg::scaled_dot_product_attention(q, k, v, {}, 0.0, s.causal).backward(grad); });
    rows.push_back({{"op", "sdpa"},
                    {"dtype", name},
                    {"shape", {B, H, T, D}},
                    {"causal", s.causal},
                    {"forward_ms", fwd},
                    {"forward_backward_ms", both},
                    {"forward_tflops", forward_flops / (fwd * 1e9)},
                    {"forward_backward_tflops", 3.5 * forward_flops / (both * 1e9)}});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  bool no_mm = false, no_sdpa = false;
  CLI::App app{"op_bench: mm and scaled_dot_product_attention timed alone on one device; prints JSON"};
  app.add_option("--device", s.device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--mm-sizes", s.mm_sizes, "square sizes n of the n x n x n products")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{32768}));
  app.add_option("--dtypes", s.dtypes, "mm dtypes: fp32, tf32 (cuda), bf16, fp16")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  app.add_option("--sdpa", s.sdpa, "attention shape B,H,T,D")
      ->delimiter(',')
      ->expected(4)
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--sdpa-dtypes", s.sdpa_dtypes, "attention dtypes")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--causal", s.causal, "causal attention (true or false)")->capture_default_str();
  app.add_option("--warmup", s.warmup, "untimed calls first")->capture_default_str()->check(CLI::Range(0, 1000));
  app.add_option("--iters", s.iters, "timed calls (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_flag("--no-mm", no_mm, "skip the products");
  app.add_flag("--no-sdpa", no_sdpa, "skip attention");
  CLI11_PARSE(app, argc, argv);
  try {
    const hg::Device device = s.device == "cuda" ? hg::Device(hg::kCUDA) : hg::Device(hg::kCPU);
    HG_CHECK(s.device != "cuda" || hg::cuda::is_available(), "op_bench",
             "--device cuda: no CUDA device (this build has no CUDA backend, or no GPU is visible)");
    nlohmann::json out = {{"tool", "op_bench"}, {"framework", "halfgrad"}, {"device", s.device}};
    out["results"] = nlohmann::json::array();
    if (!no_mm)
      for (auto& r : bench_mm(s, device)) out["results"].push_back(r);
    if (!no_sdpa)
      for (auto& r : bench_sdpa(s, device)) out["results"].push_back(r);
    std::printf("%s\n", out.dump(1).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "op_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
