// The timed training loop of one cell.
#include "runner.h"

#include <chrono>

#include "framework/cuda_graph.h"
#include "gpt2_cell.h"
#include "memory.h"

namespace amp_bench {

int64_t batch_for(const Options& options, const std::string& model, const std::string& device) {
  if (model == "wide_mlp") return device == "cuda" ? options.wide_batch_cuda : options.wide_batch_cpu;
  if (model == "resnet") return device == "cuda" ? options.resnet_batch_cuda : options.resnet_batch_cpu;
  if (model == "gpt2") return gpt2_spec(options, device).batch;
  return options.batch;
}

std::string resnet_arch(const Options& options, const std::string& model, const std::string& device) {
  if (model != "resnet") return model;
  return device == "cuda" ? options.resnet_cuda : options.resnet_cpu;
}

bool channels_last(const Options& options, const std::string& model, const std::string& device) {
  if (model != "resnet") return false;
  return device == "cuda" ? options.resnet_channels_last : options.resnet_cpu_channels_last;
}

std::optional<hg::Dtype> autocast_dtype(const std::string& precision) {
  if (precision == "bf16") return hg::kBFloat16;
  if (precision == "fp16") return hg::kFloat16;
  return std::nullopt;  // fp32, tf32
}

void record_memory(SideResult& r, bool on_cuda, int64_t rss_start) {
  if (on_cuda) {
    r.peak_bytes = cuda_peak_bytes();
    return;
  }
  r.peak_bytes = host_peak_bytes();
  r.cell_bytes = r.peak_bytes - rss_start;
}

namespace {

// The graph column: the same step captured once on static inputs, then per step a copy of the
// batch into them and one replay. Run after the loss was read (it trains on); a capture that fails
// leaves the eager figures and says why in the note.
void measure_graph(const Options& options, SideResult& r, hg::nn::Module& model, hg::optim::SGD& opt,
                   hg::amp::GradScaler& scaler, std::optional<hg::Dtype> dtype, const std::vector<Batch>& batches) {
  using clock = std::chrono::steady_clock;
  const hg::Device device(hg::kCUDA, 0);
  try {
    hg::Tensor x = hg::empty(batches[0].x.shape(), hg::TensorOptions(batches[0].x.dtype()).device(device));
    hg::Tensor y = hg::empty(batches[0].y.shape(), hg::TensorOptions(batches[0].y.dtype()).device(device));
    x.copy_(batches[0].x);
    y.copy_(batches[0].y);
    hg::cuda::Graph graph;
    graph.capture([&] {
      opt.zero_grad();
      hg::Tensor loss;
      {
        hg::amp::AutocastGuard autocast(device.type, dtype, dtype.has_value());
        loss = hg::cross_entropy(model(x), y);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    });
    std::vector<double> graph_ms;
    for (int64_t step = 0; step < options.steps; ++step) {
      const Batch& b = batches[static_cast<size_t>(step % kBatchesPerCell)];
      const auto t0 = clock::now();
      x.copy_(b.x);
      y.copy_(b.y);
      graph.replay();
      cuda_synchronize();
      graph_ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    }
    r.graph_ms = summarize(graph_ms).median;
  } catch (const hg::Error& e) {
    r.note = std::string("graph: ") + e.what();
  }
}

void measure(const Options& options, CellResult& cell, const std::vector<Batch>& host_batches,
             const StepCallback& on_step) {
  using clock = std::chrono::steady_clock;
  const hg::Device device = cell.device == "cuda" ? hg::Device(hg::kCUDA) : hg::Device(hg::kCPU);
  const bool on_cuda = device.is_cuda();
  SideResult& r = cell.hg;

  const int64_t rss_start = on_cuda ? 0 : reset_host_peak();
  if (on_cuda) cuda_set_tf32(cell.precision == "tf32");
  auto model = build_model(resnet_arch(options, cell.model, cell.device), options.seed);
  model->to(device);
  std::vector<Batch> batches;
  for (const Batch& b : host_batches) batches.push_back({b.x.to(device), b.y.to(device)});
  if (channels_last(options, cell.model, cell.device)) {  // as PyTorch's model.to(memory_format=...)
    model->to(hg::MemoryFormat::ChannelsLast);
    for (Batch& b : batches) b.x = b.x.contiguous(hg::MemoryFormat::ChannelsLast);
  }

  hg::optim::SGD opt(model->parameters(), {.lr = options.lr, .momentum = options.momentum});
  const auto dtype = autocast_dtype(cell.precision);
  hg::amp::GradScaler scaler(device, {.enabled = cell.precision == "fp16"});
  const bool fp8 = cell.precision == "fp8";
  const hg::amp::Fp8Recipe recipe;

  const int64_t total = options.warmup + options.steps;
  std::vector<double> step_ms;
  int64_t system_allocs_at_timing = 0;
  for (int64_t step = 0; step < total; ++step) {
    if (step == options.warmup) system_allocs_at_timing = hg::cpu_memory_stats().system_allocations;
    const Batch& b = batches[static_cast<size_t>(step % kBatchesPerCell)];
    const auto t0 = clock::now();
    opt.zero_grad();
    hg::Tensor loss;
    if (fp8) {
      hg::amp::Fp8Autocast region(device.type, recipe);
      loss = hg::cross_entropy((*model)(b.x), b.y);
    } else {
      hg::amp::AutocastGuard autocast(device.type, dtype, dtype.has_value());
      loss = hg::cross_entropy((*model)(b.x), b.y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    if (on_cuda) cuda_synchronize();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (step >= options.warmup) step_ms.push_back(ms);
    if (on_step) on_step(step + 1, total);
  }
  if (!on_cuda) {
    r.allocs_per_step = static_cast<double>(hg::cpu_memory_stats().system_allocations - system_allocs_at_timing) /
                        static_cast<double>(options.steps);
  }
  record_memory(r, on_cuda, rss_start);
  if (fp8) r.note = fp8_note(recipe, total, device);

  // The numerics check: the loss on the first batch after training, in float32, no autocast.
  {
    hg::NoGradGuard no_grad;
    r.final_loss = hg::cross_entropy((*model)(batches[0].x), batches[0].y).item<double>();
  }
  r.step_ms = summarize(step_ms);
  r.steps = static_cast<int64_t>(step_ms.size());
  r.samples_per_s = static_cast<double>(cell.batch) / (r.step_ms.median / 1000.0);
  if (on_cuda) measure_graph(options, r, *model, opt, scaler, dtype, batches);
}

}  // namespace

std::string fp8_note(const hg::amp::Fp8Recipe& recipe, int64_t steps, const hg::Device& device) {
  const int64_t fallbacks = recipe.fallbacks() / std::max<int64_t>(steps, 1);
  const std::string where = device.is_cpu() ? "fp8 emulated: E4M3/E5M2 casts with delayed scaling, the GEMMs in float32"
                            : hg::amp::fp8_gemm_available(device)
                                ? "fp8 on cuBLASLt: E4M3 x E4M3 forward, E5M2 gradients, delayed scaling"
                                : "no fp8 GEMMs on this GPU (compute capability below 8.9): linear/mm in bf16";
  return fmt::format("{}; {} of {} GEMMs per step fell back to bf16", where, fallbacks, fallbacks + recipe.gemms());
}

CellResult run_cell(const Options& options, const std::string& model, const std::string& precision,
                    const std::string& device, const std::vector<Batch>& batches, const StepCallback& on_step) {
  CellResult cell;
  cell.model = model;
  cell.precision = precision;
  cell.device = device;
  cell.batch = batch_for(options, model, device);
  try {
    if (model == "gpt2") {
      const Gpt2Spec spec = gpt2_spec(options, device);
      cell.tokens_per_step = spec.tokens_per_step();
      cell.flops_per_step = spec.train_flops_per_token() * static_cast<double>(cell.tokens_per_step);
      if (device == "cuda") {
        cell.peak_gflops = options.gpu_peak_tflops * 1000.0;
        cell.peak_source = "--gpu-peak-tflops";
      }
      measure_gpt2(options, cell, batches, on_step);
    } else {
      cell.flops_per_step = train_flops_per_step(model_info(resnet_arch(options, model, device)), cell.batch);
      measure(options, cell, batches, on_step);
      if (model == "resnet" && cell.hg.note.empty())
        cell.hg.note =
            resnet_arch(options, model, device) + (channels_last(options, model, device) ? ", channels-last" : "");
    }
  } catch (const hg::Error& e) {
    cell.hg = SideResult{};
    cell.hg.status = "error";
    cell.hg.note = e.what();
  }
  if (device == "cuda") {
    try {
      cuda_set_tf32(false);
    } catch (const hg::Error&) {
    }
  }
  return cell;
}

}  // namespace amp_bench
