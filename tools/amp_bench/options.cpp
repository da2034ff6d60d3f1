// Flag parsing for amp_bench.
#include "options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <sstream>

namespace amp_bench {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

namespace {

// A comma-separated list whose items must come from `allowed` ("all" means every one).
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<std::string>& target,
                      const std::vector<std::string>& allowed, const std::string& help) {
  std::string choices;
  for (const auto& a : allowed) choices += (choices.empty() ? "" : ",") + a;
  return app
      .add_option_function<std::string>(
          name,
          [&target, allowed, name](const std::string& text) {
            std::vector<std::string> items = split_list(text);
            if (items.size() == 1 && items[0] == "all") items = allowed;
            if (items.empty()) throw CLI::ValidationError(name, "needs at least one item");
            for (const auto& item : items)
              if (std::find(allowed.begin(), allowed.end(), item) == allowed.end())
                throw CLI::ValidationError(name, "unknown item '" + item + "'");
            target = items;
          },
          help + " (comma-separated, from: " + choices + "; or all)")
      ->type_name("LIST");
}

}  // namespace

ParseOutcome parse_options(int argc, const char* const* argv) {
  ParseOutcome out;
  Options& o = out.options;
  CLI::App app{
      "amp_bench: times training steps of four models in fp32, bf16 autocast, fp16 autocast + "
      "GradScaler and tf32 (CUDA), on each device present, next to PyTorch."};
  app.get_formatter()->column_width(30);
  add_list(app, "--models", o.models, kAllModels, "models to run (default: all but gpt2)");
  add_list(app, "--precisions", o.precisions, kKnownPrecisions,
           "precisions to run (default: all but fp8; tf32 runs on CUDA only; fp8's GEMMs are emulated on the CPU)");
  add_list(app, "--devices", o.devices, kAllDevices, "devices to run (default: every device present)");
  auto* steps = app.add_option("--steps", o.steps, "timed training steps per cell")
                    ->capture_default_str()
                    ->check(CLI::Range(int64_t{1}, int64_t{1000000}));
  auto* warmup = app.add_option("--warmup", o.warmup, "untimed warm-up steps before them")
                     ->capture_default_str()
                     ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  app.add_option("--rounds", o.rounds,
                 "run every cell this many times, halfgrad's cells and then PyTorch's in each round, and report "
                 "medians over the rounds (each ratio taken within a round): steadier ratios on a shared machine")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100}));
  app.add_flag("--quick", o.quick,
               "about a minute: 5 timed steps after 1 warm-up, wide_mlp batch 16 and gpt2 tiny:64:4 on cpu (unless "
               "given), PyTorch cells "
               "capped at 5 s");
  app.add_option("--batch", o.batch, "batch size of linear, mnist_mlp and mnist_cnn")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  auto* wide = app.add_option("--wide-batch-cpu", o.wide_batch_cpu, "batch size of wide_mlp on cpu")
                   ->capture_default_str()
                   ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--wide-batch-cuda", o.wide_batch_cuda, "batch size of wide_mlp on cuda")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--resnet-cpu", o.resnet_cpu,
                 "the resnet cell's network on cpu: resnet18 (3x32x32) or resnet50 (3x224x224)")
      ->capture_default_str()
      ->check(CLI::IsMember({"resnet18", "resnet50"}));
  app.add_option("--resnet-cuda", o.resnet_cuda, "the resnet cell's network on cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"resnet18", "resnet50"}));
  app.add_flag("!--no-channels-last", o.resnet_channels_last,
               "run the resnet cell on cuda in NCHW, not channels-last (NHWC, both sides' default there), for A/B");
  app.add_flag("--resnet-cpu-channels-last", o.resnet_cpu_channels_last,
               "run the resnet cell on cpu channels-last (model and batches, both sides), not NCHW");
  app.add_option("--resnet-batch-cpu", o.resnet_batch_cpu, "batch size of resnet on cpu")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--resnet-batch-cuda", o.resnet_batch_cuda, "batch size of resnet on cuda")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  auto* gpt2_cpu =
      app.add_option("--gpt2-cpu", o.gpt2_cpu,
                     "gpt2 cell on cpu as SIZE:CONTEXT:BATCH (size d12, d6, d4 or tiny; examples/gpt2_model.h)")
          ->capture_default_str();
  app.add_option("--gpt2-cuda", o.gpt2_cuda, "gpt2 cell on cuda as SIZE:CONTEXT:BATCH")->capture_default_str();
  app.add_option("--gpt2-lr", o.gpt2_lr, "gpt2's AdamW learning rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--gpu-peak-tflops", o.gpu_peak_tflops,
                 "the GPU's dense bf16/fp16 TFLOP/s, for gpt2's MFU (llm.c's count; 989 for H100/H200 SXM)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads,
                 "CPU threads for halfgrad, OpenBLAS and PyTorch (default: HG_NUM_THREADS or every core)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--seed", o.seed, "seed of the weights and synthetic data (the same for every cell)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_flag("--real-data", o.real_data,
               "train on the first MNIST training images instead of synthetic ones (not wide_mlp)");
  app.add_option("--data", o.data, "directory with the MNIST IDX files, for --real-data (tools/fetch-mnist.sh)")
      ->capture_default_str();
  app.add_option("--json", o.json, "write every result as JSON to this file");
  app.add_option("--png", o.png, "draw step times as a PNG chart (needs gnuplot)");
  app.add_flag("--no-torch", o.no_torch, "do not run the PyTorch side");
  app.add_flag("--torch-compile", o.torch_compile, "run PyTorch's gpt2 under torch.compile (cuda, torch >= 2.0)");
  app.add_flag("--kernels", o.kernels,
               "instead of training: a square float32/bfloat16 GEMM through hg::mm next to OpenBLAS sgemm, the "
               "MNIST CNN's two conv layers forward+backward, and one fused SGD step without and with the warm "
               "bf16/fp16 weight copies (median of --steps after --warmup)");
  app.add_option("--gemm-size", o.gemm_size, "size n of the n x n x n GEMM of --kernels")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));
  app.add_option("--optim-size", o.optim_size, "size n of the four n x n float32 weights of --kernels' optimizer step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{16384}));
  app.add_option(
      "--python", o.python,
      "python interpreter for the PyTorch side (default: the first of /usr/bin/python3, python3 that imports torch)");
  app.add_option("--torch-script", o.torch_script, "path of amp_bench_torch.py (default: the one in the source tree)");
  auto* cap =
      app.add_option("--torch-max-seconds", o.torch_max_seconds,
                     "stop timing a PyTorch cell after this many seconds (at least 3 steps; its bf16 on CPU is slow)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    out.exit_code = app.exit(e);
    return out;
  }
  if (o.quick) {
    if (steps->count() == 0) o.steps = 5;
    if (warmup->count() == 0) o.warmup = 1;
    if (wide->count() == 0) o.wide_batch_cpu = 16;
    if (gpt2_cpu->count() == 0) o.gpt2_cpu = "tiny:64:4";
    if (cap->count() == 0) o.torch_max_seconds = 5;
  }
  out.run = true;
  return out;
}

}  // namespace amp_bench
