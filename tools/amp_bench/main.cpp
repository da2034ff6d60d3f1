// amp_bench: the mixed-precision training benchmark (models x precisions x devices, next to
// PyTorch). See docs/BENCHMARKS.md for the method; `amp_bench --help` for the flags.
#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "gpt2_cell.h"
#include "kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "memory.h"
#include "options.h"
#include "report.h"
#include "rounds.h"
#include "runner.h"
#include "torch_side.h"

#ifndef AMP_BENCH_TORCH_SCRIPT
#define AMP_BENCH_TORCH_SCRIPT "tools/amp_bench_torch.py"
#endif

namespace {

using namespace amp_bench;

// One line per cell on a pipe; a line redrawn each step on a terminal.
class Progress {
 public:
  explicit Progress(size_t cells) : cells_(cells), tty_(::isatty(::fileno(stderr)) != 0) {}
  void step(size_t index, const std::string& what, int64_t done, int64_t total) {
    if (!tty_) return;
    fmt::print(stderr, "\r[{}/{}] {} step {}/{}\x1b[K", index + 1, cells_, what, done, total);
    std::fflush(stderr);
  }
  void done(size_t index, const std::string& what, const CellResult& c) {
    const std::string result = c.hg.ok() ? fmt::format("median {} ms", format_ms(c.hg.step_ms.median))
                                         : fmt::format("{}: {}", c.hg.status, c.hg.note);
    fmt::print(stderr, "{}[{}/{}] {} {}\n", tty_ ? "\r\x1b[K" : "", index + 1, cells_, what, result);
  }

 private:
  size_t cells_;
  bool tty_;
};

int run(const Options& options, const std::string& command) {
  if (options.threads > 0) {
    // Before the first kernel call: the pool reads HG_NUM_THREADS once.
    ::setenv("HG_NUM_THREADS", std::to_string(options.threads).c_str(), 1);
  }
  RunInfo info = machine_info();
  info.command = command;
  info.threads = hg::cpu::num_threads();
  openblas_set_num_threads(info.threads);
  info.data = options.real_data ? "mnist" : "synthetic";
  if (options.kernels) {
    fmt::print("{}; {} threads\n", info.cpu_model, info.threads);
    return run_kernels(stdout, options);
  }

  std::vector<std::string> devices = options.devices;
  const bool have_cuda = cuda_available();
  if (devices.empty()) {
    devices = {"cpu"};
    if (have_cuda) devices.push_back("cuda");
  } else if (!have_cuda && std::erase(devices, "cuda") > 0) {
    info.notes.push_back("cuda skipped: this build has no CUDA backend or no GPU is visible");
  }

  struct Planned {
    std::string model, precision, device;
  };
  std::vector<Planned> plan;
  bool skipped_tf32 = false;
  for (const auto& d : devices)
    for (const auto& m : options.models)
      for (const auto& p : options.precisions) {
        if (p == "tf32" && d != "cuda") {
          skipped_tf32 = true;
          continue;
        }
        plan.push_back({m, p, d});
      }
  if (skipped_tf32) info.notes.push_back("tf32 is a CUDA mode (TF32 tensor cores): not run on cpu");
  if (std::count(options.models.begin(), options.models.end(), "wide_mlp") &&
      std::count(devices.begin(), devices.end(), "cpu"))
    info.notes.push_back(fmt::format("wide_mlp runs batch {} on cpu ({} on cuda): batch {} would take minutes per step",
                                     options.wide_batch_cpu, options.wide_batch_cuda, options.wide_batch_cuda));
  if (std::count(options.models.begin(), options.models.end(), "gpt2")) {
    for (const auto& d : devices) {
      const Gpt2Spec s = gpt2_spec(options, d);  // a bad --gpt2-* fails here, before any cell runs
      info.notes.push_back(
          fmt::format("gpt2 on {}: {} ({} layers, {} heads, embd {}), context {}, batch {}, {} parameters; "
                      "AdamW lr {} (0.9, 0.95), weight decay 0.1 on matrices, clipping at 1.0",
                      d, s.size, s.layers, s.heads, s.embd, s.context, s.batch, s.parameters(), options.gpt2_lr));
    }
  }
  if (plan.empty()) {
    fmt::print(stderr, "amp_bench: nothing to run (tf32 runs on cuda only, and no GPU is here)\n");
    return 1;
  }

  // The batches, made once per model and batch size (MNIST read once).
  std::vector<Batch> mnist;
  if (options.real_data) {
    int64_t largest = options.batch;
    mnist = mnist_batches(options.data, largest);  // throws with the fix when missing
    if (std::count(options.models.begin(), options.models.end(), "wide_mlp"))
      info.notes.push_back("--real-data: wide_mlp has no MNIST shape and trains on synthetic data");
  }
  std::map<std::pair<std::string, int64_t>, std::vector<Batch>> batches;
  auto batches_for = [&](const std::string& model, int64_t batch,
                         const std::string& device) -> const std::vector<Batch>& {
    const std::string arch = resnet_arch(options, model, device);
    auto key = std::make_pair(model == "gpt2" ? "gpt2 " + device : arch, batch);
    auto it = batches.find(key);
    if (it != batches.end()) return it->second;
    if (model == "gpt2") return batches[key] = gpt2_batches(gpt2_spec(options, device), options.seed);
    const ModelInfo mi = model_info(arch);
    return batches[key] = options.real_data && mi.mnist_shaped ? mnist : synthetic_batches(mi, batch, options.seed);
  };

  if (!options.no_torch) {
    const std::string script = options.torch_script.empty() ? AMP_BENCH_TORCH_SCRIPT : options.torch_script;
    info.torch = find_torch(options.python, script);
    if (!info.torch.available) fmt::print(stderr, "amp_bench: PyTorch not run: {}\n", info.torch.note);
  } else {
    info.torch.note = "--no-torch";
  }

  // Each round: halfgrad's cells, then PyTorch's (one run of the script), then that round's ratios.
  std::vector<std::vector<CellResult>> rounds;
  Progress progress(plan.size() * static_cast<size_t>(options.rounds));
  for (int64_t round = 0; round < options.rounds; ++round) {
    std::vector<CellResult> cells;
    for (size_t i = 0; i < plan.size(); ++i) {
      const auto& p = plan[i];
      std::string what = fmt::format("{} {} {}", p.model, p.precision, p.device);
      if (options.rounds > 1) what += fmt::format(" (round {}/{})", round + 1, options.rounds);
      const size_t index = static_cast<size_t>(round) * plan.size() + i;
      const auto& data = batches_for(p.model, batch_for(options, p.model, p.device), p.device);
      cells.push_back(run_cell(options, p.model, p.precision, p.device, data,
                               [&](int64_t done, int64_t total) { progress.step(index, what, done, total); }));
      progress.done(index, what, cells.back());
    }
    if (info.torch.available) {
      fmt::print(stderr, "PyTorch {} ({}): running the same cells{}\n", info.torch.version, info.torch.python,
                 options.rounds > 1 ? fmt::format(" (round {}/{})", round + 1, options.rounds) : "");
      try {
        merge_torch(run_torch(info.torch, torch_arguments(options, info.threads, devices)), cells);
      } catch (const hg::Error& e) {
        info.torch.note = e.what();
        fmt::print(stderr, "amp_bench: {}; continuing without PyTorch\n", e.what());
      }
    }
    derive_comparisons(cells);
    rounds.push_back(std::move(cells));
  }
  std::vector<CellResult> cells = combine_rounds(rounds);
  ::getloadavg(info.load_end, 3);

  print_table(stdout, info, options, cells);
  int status = 0;
  if (!options.json.empty()) {
    std::ofstream out(options.json);
    out << to_json(info, options, cells).dump(2) << "\n";
    if (!out) {
      fmt::print(stderr, "amp_bench: could not write {}\n", options.json);
      status = 1;
    }
  }
  if (!options.png.empty()) {
    try {
      write_png(options.png, info, cells);
    } catch (const hg::Error& e) {
      fmt::print(stderr, "amp_bench: {}\n", e.what());
      status = 1;
    }
  }
  for (const auto& c : cells)
    if (c.hg.status == "error") status = 1;
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = amp_bench::parse_options(argc, argv);
  if (!parsed.run) return parsed.exit_code;
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  try {
    return run(parsed.options, command);
  } catch (const std::exception& e) {
    fmt::print(stderr, "amp_bench: {}\n", e.what());
    return 1;
  }
}
