// amp_bench's command line: the settings of one run and the parser that fills them (CLI11).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace amp_bench {

inline const std::vector<std::string> kAllModels = {"linear", "mnist_mlp", "mnist_cnn", "wide_mlp", "resnet", "gpt2"};
// resnet and gpt2 run when asked for (--models resnet,gpt2, or all): their cells take minutes on a CPU.
inline const std::vector<std::string> kDefaultModels = {"linear", "mnist_mlp", "mnist_cnn", "wide_mlp"};
inline const std::vector<std::string> kAllPrecisions = {"fp32", "bf16", "fp16", "tf32"};
// fp8 (amp::Fp8Autocast) runs when asked for: its GEMMs are emulated on the CPU (cuBLASLt's fp8 GEMMs
// on CUDA with compute capability 8.9+) and PyTorch has no fp8 autocast to time beside it.
inline const std::vector<std::string> kKnownPrecisions = {"fp32", "bf16", "fp16", "tf32", "fp8"};
inline const std::vector<std::string> kAllDevices = {"cpu", "cuda"};

struct Options {
  std::vector<std::string> models = kDefaultModels;
  std::vector<std::string> precisions = kAllPrecisions;
  std::vector<std::string> devices;  // empty: every device present
  int64_t steps = 30;                // timed steps per cell
  int64_t warmup = 5;                // untimed steps before them
  int64_t rounds = 1;                // passes over the plan, halfgrad's cells then PyTorch's in each
  int64_t batch = 128;               // the MNIST-shaped models
  int64_t wide_batch_cpu = 64;       // wide_mlp on cpu (4096 is minutes per step there)
  int64_t wide_batch_cuda = 4096;
  int64_t resnet_batch_cpu = 32;  // resnet on cpu (ResNet-18, 3x32x32, by default)
  int64_t resnet_batch_cuda = 256;
  std::string resnet_cpu = "resnet18";    // the resnet cell's network on cpu (resnet18 or resnet50)
  std::string resnet_cuda = "resnet50";   // and on cuda
  bool resnet_channels_last = true;       // the resnet cell on cuda in channels-last (NHWC), both sides
  bool resnet_cpu_channels_last = false;  // the resnet cell on cpu in channels-last, both sides
  std::string gpt2_cpu = "d4:256:4";      // gpt2 SIZE:CONTEXT:BATCH on cpu
  std::string gpt2_cuda = "d12:1024:16";  // and on cuda
  double gpt2_lr = 3e-4;                  // its AdamW learning rate (constant)
  double gpu_peak_tflops = 989;           // dense bf16/fp16 peak for MFU (H100/H200 SXM)
  int threads = 0;                        // 0: halfgrad's default (HG_NUM_THREADS or every core)
  uint64_t seed = 0;
  double lr = 0.01, momentum = 0.9;
  bool quick = false;
  bool real_data = false;
  std::string data = "datasets/mnist";
  std::string json, png;
  bool no_torch = false;
  bool torch_compile = false;     // the PyTorch side's gpt2 under torch.compile (cuda, torch >= 2.0)
  bool kernels = false;           // the kernel microbenchmarks instead of the training cells
  int64_t gemm_size = 1024;       // their square GEMM's size
  int64_t optim_size = 4096;      // their optimizer step's four n x n weights (wide_mlp's)
  std::string python;             // empty: search for one that can import torch
  std::string torch_script;       // empty: the script next to the sources
  double torch_max_seconds = 60;  // per PyTorch cell: stop timing early past this (>= 3 steps)
};

struct ParseOutcome {
  Options options;
  bool run = false;  // false: stop with exit_code (help printed, or a bad flag)
  int exit_code = 0;
};

// Parses argv (argv[0] is the program). Prints help or the error itself when it says not to run.
ParseOutcome parse_options(int argc, const char* const* argv);

// "a,b" -> {"a", "b"}; empty items dropped.
std::vector<std::string> split_list(const std::string& text);

}  // namespace amp_bench
