// Runs one halfgrad cell: build the model, warm up, time N training steps, read memory and the
// final loss.
#pragma once

#include <functional>
#include <vector>

#include "data.h"
#include "options.h"
#include "results.h"

namespace amp_bench {

// Called with (step done, steps in all) while a cell runs, for the progress line.
using StepCallback = std::function<void(int64_t, int64_t)>;

int64_t batch_for(const Options& options, const std::string& model, const std::string& device);

// Never throws for a failing cell: an hg::Error becomes status "error" with its message.
CellResult run_cell(const Options& options, const std::string& model, const std::string& precision,
                    const std::string& device, const std::vector<Batch>& batches, const StepCallback& on_step);

}  // namespace amp_bench
