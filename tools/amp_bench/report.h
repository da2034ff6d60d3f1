// What amp_bench shows and writes: the comparisons between cells, the terminal table, the
// JSON document and the gnuplot chart.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "options.h"
#include "results.h"
#include "torch_side.h"

namespace amp_bench {

// The machine and the moment, recorded with every run.
struct RunInfo {
  std::string date;                                           // UTC, ISO 8601
  std::string command;                                        // the command line
  std::string cpu_model;                                      // /proc/cpuinfo "model name"
  std::string cpu_paths;                                      // which CPU kernels the products take
  int cores = 0;                                              // hardware threads the OS reports
  int threads = 0;                                            // threads halfgrad (and PyTorch) used
  double load_start[3] = {0, 0, 0}, load_end[3] = {0, 0, 0};  // 1, 5, 15-minute load averages
  std::string data;                                           // "synthetic" or "mnist"
  std::vector<std::string> notes;
  TorchInfo torch;
};

RunInfo machine_info();  // date, cpu model, cores, load now

// Fills speedup_vs_fp32, loss_diff_vs_fp32, hg_over_torch and torch_speedup_vs_fp32.
void derive_comparisons(std::vector<CellResult>& cells);

// "12.3", "0.456", "1234": step times readable at any scale.
std::string format_ms(double ms);

// gpt2 cells: tokens/s and MFU (llm.c's FLOP count over the cell's peak), NaN when not known.
double tokens_per_s(const CellResult& cell, const SideResult& side);
double mfu(const CellResult& cell, const SideResult& side);
void print_gpt2(std::FILE* out, const std::vector<CellResult>& cells);

void print_table(std::FILE* out, const RunInfo& info, const Options& options, const std::vector<CellResult>& cells);

// With --rounds: each cell's per-round medians (halfgrad / PyTorch) and ratio, one line a cell
// (print_table ends with it).
void print_rounds(std::FILE* out, const std::vector<CellResult>& cells);

nlohmann::json to_json(const RunInfo& info, const Options& options, const std::vector<CellResult>& cells);

// Draws median step time per model (one cluster per model and device, one bar per precision
// and framework, log scale) with gnuplot. Throws hg::Error when gnuplot is missing or fails.
void write_png(const std::string& path, const RunInfo& info, const std::vector<CellResult>& cells);

}  // namespace amp_bench
