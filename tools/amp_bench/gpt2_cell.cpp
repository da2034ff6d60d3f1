// The gpt2 cell's spec, data, portable weights and timed loop.
#include "gpt2_cell.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "examples/gpt2_model.h"
#include "memory.h"
#include "portable_random.h"

namespace amp_bench {

int64_t Gpt2Spec::parameters() const {
  const int64_t C = embd;
  const int64_t per_block = 12 * C * C + 13 * C;  // ln_1, c_attn, attn c_proj, ln_2, c_fc, mlp c_proj
  return padded_vocab * C + context * C + layers * per_block + 2 * C;
}

double Gpt2Spec::train_flops_per_token() const {
  return 6.0 * static_cast<double>(parameters()) + 6.0 * static_cast<double>(layers * embd * context);
}

Gpt2Spec parse_gpt2_spec(const std::string& text, const std::string& flag) {
  const auto first = text.find(':'), second = text.find(':', first == std::string::npos ? first : first + 1);
  HG_CHECK(first != std::string::npos && second != std::string::npos, "amp_bench",
           "{} '{}': expected SIZE:CONTEXT:BATCH, e.g. d4:256:4", flag, text);
  Gpt2Spec s;
  s.size = text.substr(0, first);
  gpt2::Config c;
  try {
    c = gpt2::named_config(s.size);
  } catch (const hg::Error&) {
    hg::fail("amp_bench", "{} '{}': unknown size '{}' (d12, d6, d4 or tiny)", flag, text, s.size);
  }
  auto number = [&](const std::string& part, const char* what) {
    int64_t v = 0;
    size_t used = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HG_CHECK(used == part.size() && !part.empty() && v >= 1 && v <= (int64_t{1} << 20), "amp_bench",
             "{} '{}': {} must be a whole number from 1 to 2^20, got '{}'", flag, text, what, part);
    return v;
  };
  s.context = number(text.substr(first + 1, second - first - 1), "the context");
  s.batch = number(text.substr(second + 1), "the batch");
  s.layers = c.layers;
  s.heads = c.heads;
  s.embd = c.embd;
  c.context = s.context;
  s.vocab = c.vocab;
  s.padded_vocab = c.padded_vocab();
  return s;
}

Gpt2Spec gpt2_spec(const Options& options, const std::string& device) {
  return device == "cuda" ? parse_gpt2_spec(options.gpt2_cuda, "--gpt2-cuda")
                          : parse_gpt2_spec(options.gpt2_cpu, "--gpt2-cpu");
}

std::vector<Batch> gpt2_batches(const Gpt2Spec& spec, uint64_t seed) {
  std::vector<Batch> out;
  const int64_t T = spec.context, row = T + 1;
  for (int64_t j = 0; j < kBatchesPerCell; ++j) {
    const StreamUniform u(seed, 3000 + static_cast<uint64_t>(j));
    std::vector<int64_t> tokens(static_cast<size_t>(spec.batch * row));
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = std::min<int64_t>(spec.vocab - 1, static_cast<int64_t>(u(i) * static_cast<double>(spec.vocab)));
    const hg::Tensor all = hg::tensor(tokens, {spec.batch, row});
    out.push_back({all.narrow(1, 0, T).contiguous(), all.narrow(1, 1, T).contiguous()});
  }
  return out;
}

namespace {

gpt2::Config config_of(const Gpt2Spec& s) {
  gpt2::Config c{s.layers, s.heads, s.embd, s.context};
  c.vocab = s.vocab;
  return c;
}

// llm.c's scheme with portable numbers: each matrix U(-a, a) of the same standard deviation as
// its N(0, 0.02) (residual projections 0.02 / sqrt(2 layers)), biases 0, norms 1, wte's padding
// rows 0; tensor k of the sorted names draws StreamUniform(seed, 1000 + k), as the PyTorch side.
void init_portable(gpt2::GPT2& model, uint64_t seed) {
  hg::NoGradGuard no_grad;
  auto params = model.named_parameters();
  std::sort(params.begin(), params.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const double layers = static_cast<double>(model.config().layers);
  for (size_t k = 0; k < params.size(); ++k) {
    const auto& [name, p] = params[k];
    hg::Tensor dst = p;
    if (p.dim() < 2) {
      dst.fill_(name.ends_with("bias") ? 0.0 : 1.0);
      continue;
    }
    const double sd = name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(2.0 * layers) : 0.02;
    const double a = sd * std::sqrt(3.0);
    const StreamUniform u(seed, 1000 + k);
    std::vector<float> values(static_cast<size_t>(p.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((2.0 * u(i) - 1.0) * a);
    dst.copy_(hg::tensor(values, p.shape()));
  }
  const gpt2::Config& c = model.config();
  model.transformer->wte->weight.narrow(0, c.vocab, c.padded_vocab() - c.vocab).zero_();
}

// `fp8`: in an fp8 region with that recipe (the fp8 cell).
hg::Tensor loss_of(gpt2::GPT2& model, const Batch& b, std::optional<hg::Dtype> dtype, hg::DeviceType device,
                   const hg::amp::Fp8Recipe* fp8 = nullptr) {
  hg::amp::AutocastGuard autocast(device, dtype, dtype.has_value());
  std::optional<hg::amp::Fp8Autocast> fp8_region;
  if (fp8) fp8_region.emplace(device, *fp8);
  const hg::Tensor logits = model(b.x);  // over the padded vocabulary (set_padded_logits)
  // llm.c's fused classifier: the gradient written over the logits during the forward, the
  // padding columns left out.
  return hg::cross_entropy_fused_(logits.reshape({-1, logits.size(-1)}), b.y.reshape({-1}), hg::Reduction::Mean, -100,
                                  0.0, model.config().vocab);
}

// GFLOP/s of the step's largest GEMM (the classifier, [B T, C] x [C, padded vocab]) in the precision
// the cell computes in: the rate the step could reach if it were all GEMM.
double cpu_gemm_gflops(const Gpt2Spec& s, const std::string& precision) {
  const hg::Dtype dt = autocast_dtype(precision).value_or(hg::kFloat32);
  hg::NoGradGuard no_grad;
  const hg::Tensor x = hg::randn({s.tokens_per_step(), s.embd}).to(dt);
  const hg::Tensor w = hg::randn({s.padded_vocab, s.embd}).to(dt);
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const hg::Tensor y = hg::linear(x, w);
    (void)y;
    if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 2.0 * static_cast<double>(s.tokens_per_step() * s.embd * s.padded_vocab);
  return flops / (ms[ms.size() / 2] * 1e6);
}

}  // namespace

void measure_gpt2(const Options& options, CellResult& cell, const std::vector<Batch>& host_batches,
                  const StepCallback& on_step) {
  using clock = std::chrono::steady_clock;
  const Gpt2Spec spec = gpt2_spec(options, cell.device);
  const hg::Device device = cell.device == "cuda" ? hg::Device(hg::kCUDA) : hg::Device(hg::kCPU);
  const bool on_cuda = device.is_cuda();
  SideResult& r = cell.hg;

  const int64_t rss_start = on_cuda ? 0 : reset_host_peak();
  if (on_cuda) cuda_set_tf32(cell.precision == "tf32");
  gpt2::GPT2 model(config_of(spec));
  model.set_padded_logits(true);  // as the example trains: llm.c's padded classifier
  init_portable(model, options.seed);
  model.to(device);
  std::vector<Batch> batches;
  for (const Batch& b : host_batches) batches.push_back({b.x.to(device), b.y.to(device)});

  hg::TensorList decay, no_decay;
  for (auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const hg::optim::AdamWOptions adamw{.lr = options.gpt2_lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  hg::optim::AdamWOptions plain = adamw;
  plain.weight_decay = 0.0;
  hg::optim::AdamWOptions decayed = adamw;
  decayed.weight_decay = 0.1;
  hg::optim::AdamW opt({{decay, decayed}, {no_decay, plain}});
  const auto dtype = autocast_dtype(cell.precision);
  hg::amp::GradScaler scaler(device, {.enabled = cell.precision == "fp16"});
  const hg::amp::Fp8Recipe recipe;
  const hg::amp::Fp8Recipe* fp8 = cell.precision == "fp8" ? &recipe : nullptr;

  const int64_t total = options.warmup + options.steps;
  std::vector<double> step_ms;
  for (int64_t step = 0; step < total; ++step) {
    const Batch& b = batches[static_cast<size_t>(step % kBatchesPerCell)];
    const auto t0 = clock::now();
    opt.zero_grad();
    scaler.scale(loss_of(model, b, dtype, device.type, fp8)).backward();
    scaler.unscale_(opt);
    (void)hg::optim::clip_grad_norm_(opt.params(), 1.0);
    scaler.step(opt);
    scaler.update();
    if (on_cuda) cuda_synchronize();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (step >= options.warmup) step_ms.push_back(ms);
    if (on_step) on_step(step + 1, total);
  }
  record_memory(r, on_cuda, rss_start);
  if (fp8) r.note = fp8_note(recipe, total, device);
  {
    hg::NoGradGuard no_grad;
    r.final_loss = loss_of(model, batches[0], std::nullopt, device.type).item<double>();
  }
  r.step_ms = summarize(step_ms);
  r.steps = static_cast<int64_t>(step_ms.size());
  r.samples_per_s = static_cast<double>(cell.batch) / (r.step_ms.median / 1000.0);
  if (!on_cuda) {
    cell.peak_gflops = cpu_gemm_gflops(spec, cell.precision);
    cell.peak_source = "this CPU's classifier GEMM";
  }
}

}  // namespace amp_bench
