// What the MNIST examples share besides their training loops (each example shows its own): flags,
// the device, evaluation, checkpoints, the progress line and the closing JSON line.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace examples {

using hg::Tensor;

struct Args {
  std::string data = "datasets/mnist";
  int64_t epochs = 1;
  int64_t batch_size = 128;
  double lr = 0.05;
  double momentum = 0.9;
  std::string device;  // empty: cuda where a GPU is, else cpu
  std::string amp = "off";
  uint64_t seed = 0;
  int64_t workers = 0;  // DataLoader worker threads (0: batches are read on the training thread)
  std::string save, resume;
  bool distributed = false;            // --distributed: data-parallel over mpirun's ranks
  bool distributed_supported = false;  // set by the examples that offer --distributed
  std::string reduce_dtype = "off";    // --reduce-dtype: DDP's gradient compression (off, bf16, fp16)
  bool cuda_graph = false;             // --cuda-graph: capture the step once, replay it (CUDA only)
};

// Flag validators with short messages (CLI11's own ranges print 300-digit bounds). The text is
// checked before CLI11 converts it, so "1e12", "-1" or "abc" never reach an int64 or uint64.
inline std::string shorten(const std::string& s) { return s.size() > 24 ? s.substr(0, 21) + "..." : s; }

inline CLI::Validator whole_number(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
          return fmt::format("expected a whole number in [{}, {}], got '{}'", lo, hi, shorten(s));
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

inline CLI::Validator real_number(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < lo || v > hi)
          return fmt::format("expected a number in [{}, {}], got '{}'", lo, hi, shorten(s));
        return {};
      },
      fmt::format("NUMBER in [{}, {}]", lo, hi));
}

// Parses flags; on an error prints one line "error: ..." to stderr and sets a non-zero exit code.
// Returns false when the program should stop (help printed, or an error).
inline bool parse_cli(CLI::App& app, int argc, char** argv, int& exit_code) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    exit_code = app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    exit_code = e.get_exit_code() != 0 ? e.get_exit_code() : 2;
    return false;
  }
  return true;
}

// A number for the JSON summary line: JSON has no NaN or infinity, so those become null.
inline std::string json_number(double v, int decimals) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : std::string("null");
}

// Limits on the examples' flags: generous for real runs, small enough that nothing overflows.
constexpr int64_t kMaxEpochs = 1'000'000;
constexpr int64_t kMaxBatch = 1 << 24;
constexpr double kMaxLr = 1e3;
constexpr int64_t kMaxSeed = INT64_MAX;
constexpr int64_t kMaxWorkers = 64;

// The common flags; returns false (after printing help or the error) when the program should stop.
inline bool parse_args(int argc, char** argv, const std::string& description, Args& args, int& exit_code) {
  CLI::App app{description};
  app.add_option("--data", args.data, "directory with the MNIST IDX files (tools/fetch-mnist.sh)")
      ->capture_default_str();
  app.add_option("--epochs", args.epochs, "passes over the training set")
      ->capture_default_str()
      ->check(whole_number(1, kMaxEpochs));
  app.add_option("--batch-size", args.batch_size, "samples per step")
      ->capture_default_str()
      ->check(whole_number(1, kMaxBatch));
  app.add_option("--lr", args.lr, "learning rate (SGD, momentum 0.9)")
      ->capture_default_str()
      ->check(real_number(0, kMaxLr));
  app.add_option("--device", args.device, "cpu or cuda (default: cuda where a GPU is, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--amp", args.amp, "mixed precision: off, bf16, or fp16 (with a GradScaler)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--seed", args.seed, "seed for initialisation and shuffling")
      ->capture_default_str()
      ->check(whole_number(0, kMaxSeed));
  app.add_option("--workers", args.workers, "background threads that prepare batches ahead (0: none)")
      ->capture_default_str()
      ->check(whole_number(0, kMaxWorkers));
  app.add_option("--save", args.save, "write a checkpoint (safetensors) after every epoch");
  app.add_option("--resume", args.resume, "continue from a checkpoint written by --save");
  app.add_flag("--cuda-graph", args.cuda_graph,
               "capture the training step in a CUDA graph after 3 warm-up steps and replay it (--device cuda)");
  if (args.distributed_supported)
    app.add_flag("--distributed", args.distributed,
                 "data-parallel over mpirun's ranks or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT: "
                 "--batch-size is the global batch, split evenly across ranks");
  if (args.distributed_supported)
    app.add_option("--reduce-dtype", args.reduce_dtype,
                   "with --distributed: all-reduce the gradients in bf16 or fp16 (half the bytes) or off")
        ->capture_default_str()
        ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  return parse_cli(app, argc, argv, exit_code);
}

inline hg::Device pick_device(const Args& args) {
  HG_CHECK(!(args.cuda_graph && args.distributed), "--cuda-graph",
           "cannot capture a data-parallel step (collectives are refused in a capture, docs/DISTRIBUTED.md)");
  HG_CHECK(!args.cuda_graph || (args.device != "cpu" && hg::cuda::is_available()), "--cuda-graph",
           "needs a GPU and --device cuda ({})",
           hg::cuda::is_built() ? "no CUDA device is visible" : hg::cuda::backend_error());
  if (args.device.empty()) return hg::cuda::is_available() ? hg::Device(hg::kCUDA) : hg::Device(hg::kCPU);
  if (args.device == "cpu") return hg::kCPU;
  HG_CHECK(hg::cuda::is_available(), "device",
           "--device cuda: this build has no usable CUDA backend or no GPU is visible; use --device cpu");
  return hg::kCUDA;
}

inline std::optional<hg::Dtype> amp_dtype(const Args& args) {
  if (args.amp == "bf16") return hg::kBFloat16;
  if (args.amp == "fp16") return hg::kFloat16;
  return std::nullopt;
}

// Runs forward under the autocast mode that --amp asks for (cross_entropy's autocast policy then
// computes the loss in float32).
inline Tensor forward(hg::nn::Module& model, const Tensor& x, const Args& args) {
  const auto dtype = amp_dtype(args);
  hg::amp::AutocastGuard autocast(x.device().type, dtype, dtype.has_value());
  return model(x);
}

inline double accuracy(hg::nn::Module& model, const hg::data::TensorDataset& test, hg::Device device,
                       const Args& args) {
  hg::NoGradGuard no_grad;
  model.eval();
  hg::data::DataLoader loader(test, {.batch_size = 1000});
  int64_t correct = 0;
  for (hg::TensorList batch : loader) {
    const auto pred = hg::argmax(forward(model, batch[0].to(device), args), 1).to_vector<int64_t>();
    const auto y = batch[1].to_vector<int64_t>();
    for (size_t i = 0; i < y.size(); ++i) correct += pred[i] == y[i];
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

// Shows progress: one line rewritten in place on a terminal, plain lines every quarter epoch otherwise.
class Progress {
 public:
  Progress() : tty_(::isatty(::fileno(stdout)) != 0) {}
  void update(int64_t epoch, int64_t epochs, int64_t step, int64_t steps, double loss, double samples_per_s,
              double eta_s) {
    const bool last = step == steps;
    const std::string line = fmt::format("epoch {}/{} step {}/{} loss {:.4f} {:.0f} samples/s ETA {:.0f}s", epoch,
                                         epochs, step, steps, loss, samples_per_s, eta_s);
    if (tty_) {
      if (last || step % 10 == 0) fmt::print("\r{}\x1b[K{}", line, last ? "\n" : "");
      std::fflush(stdout);
    } else if (last || step % std::max<int64_t>(1, steps / 4) == 0) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
    }
  }

 private:
  bool tty_;
};

// A whole training state in one safetensors file: model.*, optim.*, scaler.*, the next epoch and
// the generator's state.
inline void save_checkpoint(const std::string& path, const hg::nn::Module& model, const hg::optim::Optimizer& opt,
                            const hg::amp::GradScaler& scaler, int64_t next_epoch) {
  hg::StateDict all = hg::with_prefix(model.state_dict(), "model.");
  for (auto& [k, v] : hg::with_prefix(opt.state_dict(), "optim.")) all[k] = v;
  for (auto& [k, v] : hg::with_prefix(scaler.state_dict(), "scaler.")) all[k] = v;
  all["epoch"] = hg::scalar_tensor(static_cast<double>(next_epoch), hg::kInt64);
  all["rng"] = hg::get_rng_state();  // dropout and shuffling draw from it: a resumed run draws the same
  hg::save(all, path, {{"format", "halfgrad-training"}});
}

inline int64_t load_checkpoint(const std::string& path, hg::nn::Module& model, hg::optim::Optimizer& opt,
                               hg::amp::GradScaler& scaler) {
  const hg::StateDict all = hg::load(path);
  model.load_state_dict(hg::strip_prefix(all, "model."));
  opt.load_state_dict(hg::strip_prefix(all, "optim."));
  scaler.load_state_dict(hg::strip_prefix(all, "scaler."));
  HG_CHECK(all.count("epoch"), "resume", "{}: not a training checkpoint (no 'epoch' entry)", path);
  if (all.count("rng")) hg::set_rng_state(all.at("rng"));  // checkpoints before it had none
  // A NaN or huge epoch would otherwise become an undefined cast and a near-endless loop.
  return hg::state_count(all.at("epoch"), "resume", "epoch", 0, kMaxEpochs);
}

// Continues from --resume when it is given: returns the epoch to start from (0 without it).
inline int64_t resume(const Args& args, hg::nn::Module& model, hg::optim::Optimizer& opt, hg::amp::GradScaler& scaler) {
  if (args.resume.empty()) return 0;
  const int64_t epoch = load_checkpoint(args.resume, model, opt, scaler);
  fmt::print("resumed from {} at epoch {}\n", args.resume, epoch);
  return epoch;
}

// Times the training steps, shows progress, and prints the JSON summary that is the examples'
// last line (tools/accuracy-sweep.sh reads it).
class TrainLog {
 public:
  TrainLog(int64_t epochs, int64_t steps_per_epoch) : epochs_(epochs), steps_(steps_per_epoch) {}

  void start_epoch(int64_t epoch) {
    epoch_ = epoch;
    step_ = 0;
    epoch_start_ = clock::now();
  }
  void start_step() { step_start_ = clock::now(); }
  // After a step on `samples` samples whose loss was `loss`.
  void end_step(double loss, int64_t samples) {
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - step_start_).count();
    step_ms_.push_back(ms);
    train_seconds_ += ms / 1000;
    samples_ += samples;
    recent_losses_.push_back(loss);
    if (recent_losses_.size() > 50) recent_losses_.erase(recent_losses_.begin());
    ++step_;
    const double elapsed = std::chrono::duration<double>(clock::now() - epoch_start_).count();
    progress_.update(epoch_ + 1, epochs_, step_, steps_, loss, static_cast<double>(samples_) / train_seconds_,
                     elapsed / static_cast<double>(step_) * static_cast<double>(steps_ - step_));
  }

  void summary(const std::string& name, hg::Device device, const Args& args, double test_accuracy) {
    std::sort(step_ms_.begin(), step_ms_.end());
    double final_loss = 0;
    for (double l : recent_losses_) final_loss += l / static_cast<double>(recent_losses_.size());
    fmt::print(
        R"({{"model":"{}","device":"{}","amp":"{}","epochs":{},"test_accuracy":{},"final_loss":{},"step_ms_median":{},"samples_per_s":{}}})"
        "\n",
        name, device.is_cpu() ? "cpu" : "cuda", args.amp, args.epochs, json_number(test_accuracy, 4),
        json_number(final_loss, 4), json_number(step_ms_.empty() ? 0.0 : step_ms_[step_ms_.size() / 2], 2),
        json_number(train_seconds_ > 0 ? static_cast<double>(samples_) / train_seconds_ : 0.0, 0));
  }

 private:
  using clock = std::chrono::steady_clock;
  int64_t epochs_, steps_, epoch_ = 0, step_ = 0, samples_ = 0;
  clock::time_point epoch_start_, step_start_;
  std::vector<double> step_ms_, recent_losses_;
  double train_seconds_ = 0;
  Progress progress_;
};

// Runs body, turning an hg::Error into a message on stderr and exit code 1.
// The op totals an hg::OpRecorder kept over `steps` training steps, largest first, per step:
// where a step's time goes (--profile). Nested ops are counted inside their caller too.
inline void print_op_profile(const hg::OpRecorder& recorder, int64_t steps, size_t rows = 20) {
  const auto totals = recorder.totals();
  double all = 0;
  for (const auto& t : totals) all += t.micros;
  fmt::print("op profile over the last {} steps (per step; nested ops also count in their caller, {:.0f} us in all):\n",
             steps, all / static_cast<double>(steps));
  for (size_t i = 0; i < std::min(rows, totals.size()); ++i) {
    const auto& t = totals[i];
    fmt::print("  {:>9.1f} us {:>6.1f} calls  {}{}\n", t.micros / static_cast<double>(steps),
               static_cast<double>(t.calls) / static_cast<double>(steps), t.backward ? "backward " : "", t.name);
  }
}

inline int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const hg::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // a user's callback, or the C++ library: named, never terminate
    fmt::print(stderr, "error: {}: {}\n", hg::type_name(e), e.what());
    return 1;
  } catch (...) {
    fmt::print(stderr, "error: an exception that is not a std::exception\n");
    return 1;
  }
}

}  // namespace examples
