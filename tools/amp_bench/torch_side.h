// The PyTorch side: finding a python that can import torch, running tools/amp_bench_torch.py
// with the same settings, and reading its JSON into the cells.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "options.h"
#include "results.h"

namespace amp_bench {

struct TorchInfo {
  bool available = false;
  std::string python, version, script;
  std::string note;  // why it did not run, or what went wrong
};

// `explicit_python` if given (it must import torch), else the first of /usr/bin/python3 and
// python3 on PATH that can `import torch`. available = false with a note when none can.
TorchInfo find_torch(const std::string& explicit_python, const std::string& script);

// The argument list the script gets for these options (threads: the count halfgrad uses).
std::vector<std::string> torch_arguments(const Options& options, int threads, const std::vector<std::string>& devices);

// Runs the script (its progress goes to our stderr) and returns its JSON; throws hg::Error
// with the reason when it fails or prints something that is not JSON.
nlohmann::json run_torch(const TorchInfo& info, const std::vector<std::string>& arguments);

// Copies the script's results into the matching cells (model, precision, device).
void merge_torch(const nlohmann::json& torch_json, std::vector<CellResult>& cells);

// One side's result from the script's JSON for one cell.
SideResult side_from_json(const nlohmann::json& entry);

}  // namespace amp_bench
