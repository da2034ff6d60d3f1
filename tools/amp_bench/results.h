// What a benchmark cell measured (halfgrad's side and PyTorch's) and the comparisons derived
// from the other cells of the same model and device.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stats.h"

namespace amp_bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct SideResult {
  std::string status = "ok";  // ok, unsupported, error
  std::string note;           // why, when not ok; or a remark (e.g. steps cut by a time cap)
  Summary step_ms;
  int64_t steps = 0;  // timed steps run
  double samples_per_s = 0;
  double final_loss = kNaN;
  int64_t peak_bytes = 0;         // CPU: VmHWM at the end; CUDA: allocator peak
  int64_t cell_bytes = 0;         // CPU: VmHWM minus the resident size when the cell began
  double allocs_per_step = kNaN;  // allocator requests to the system per timed step (halfgrad)
  // CUDA (halfgrad): the median step of the same training step captured once in a CUDA graph and
  // replayed (each batch copied into the static inputs first), timed after the eager steps.
  double graph_ms = kNaN;
  bool ok() const { return status == "ok"; }
};

// One cell's figures in one round of --rounds (rounds.h), after that round's comparisons.
struct RoundFigures {
  double hg_median_ms = kNaN, torch_median_ms = kNaN;
  double speedup_vs_fp32 = kNaN, hg_over_torch = kNaN, torch_speedup_vs_fp32 = kNaN;
};

struct CellResult {
  std::string model, precision, device;
  int64_t batch = 0;
  double flops_per_step = 0;
  int64_t tokens_per_step = 0;  // gpt2: batch x context (0 for the other models)
  // gpt2: the rate its FLOP count is measured against (MFU): the GPU's dense 16-bit peak from
  // --gpu-peak-tflops, or on the CPU the rate this machine's own classifier GEMM reaches.
  double peak_gflops = kNaN;
  std::string peak_source;
  SideResult hg;
  std::optional<SideResult> torch;  // absent: PyTorch not run
  // Derived (derive_comparisons): halfgrad fp32 median / this median on the same device and
  // model; this final loss minus fp32's; halfgrad median / PyTorch median; the same for PyTorch;
  // halfgrad's final loss minus PyTorch's in the same precision (same weights, data and step
  // count, so it checks that both trained the same model; absent when PyTorch's steps were cut).
  double speedup_vs_fp32 = kNaN;
  double loss_diff_vs_fp32 = kNaN;
  double hg_over_torch = kNaN;
  double torch_speedup_vs_fp32 = kNaN;
  double loss_diff_vs_torch = kNaN;
  // Each round's figures, in order (combine_rounds); empty before the rounds are combined.
  std::vector<RoundFigures> rounds;
};

}  // namespace amp_bench
