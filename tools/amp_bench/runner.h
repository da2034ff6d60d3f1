// Runs one halfgrad cell: build the model, warm up, time N training steps, read memory and the
// final loss.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "data.h"
#include "options.h"
#include "results.h"

namespace amp_bench {

// Called with (step done, steps in all) while a cell runs, for the progress line.
using StepCallback = std::function<void(int64_t, int64_t)>;

// The autocast dtype of a precision: bfloat16 or float16, none for fp32 and tf32.
std::optional<hg::Dtype> autocast_dtype(const std::string& precision);
// A cell's memory after its steps: CUDA's allocator peak, or on the CPU the resident peak and its
// growth since rss_start.
void record_memory(SideResult& r, bool on_cuda, int64_t rss_start);

// The fp8 cells' note: where the GEMMs ran (cuBLASLt's fp8 GEMMs, or emulated on the CPU) and how
// many of a step's linear/mm calls fell back to bfloat16 (shapes fp8 cannot take, or a GPU below
// compute capability 8.9); `steps` is how many steps ran in the recipe's regions.
std::string fp8_note(const hg::amp::Fp8Recipe& recipe, int64_t steps, const hg::Device& device);

int64_t batch_for(const Options& options, const std::string& model, const std::string& device);
// The network a cell builds (models.h): the resnet cell's is --resnet-cpu / --resnet-cuda's
// (ResNet-18 on the CPU, ResNet-50 on CUDA by default), the others' their own name.
std::string resnet_arch(const Options& options, const std::string& model, const std::string& device);
// Whether the cell runs channels-last (the resnet cell on CUDA unless --no-channels-last).
bool channels_last(const Options& options, const std::string& model, const std::string& device);

// Never throws for a failing cell: an hg::Error becomes status "error" with its message.
CellResult run_cell(const Options& options, const std::string& model, const std::string& precision,
                    const std::string& device, const std::vector<Batch>& batches, const StepCallback& on_step);

}  // namespace amp_bench
