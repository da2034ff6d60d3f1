// The table, the JSON and the chart.
#include "report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <halfgrad.h>

#include "kernels/cpu/conv/onednn.h"  // which paths this machine's products and convolutions take
#include "kernels/cpu/gemm/route.h"

namespace amp_bench {

RunInfo machine_info() {
  RunInfo info;
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  info.date = buf;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      info.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  info.cores = static_cast<int>(std::thread::hardware_concurrency());
  info.cpu_paths =
      hg::cpu::describe_routes(hg::cpu::cpu_caps(), hg::cpu::forced_gemm_path()) + "; " + hg::cpu::cpu_conv_paths();
  ::getloadavg(info.load_start, 3);
  return info;
}

void derive_comparisons(std::vector<CellResult>& cells) {
  for (auto& c : cells) {
    c.speedup_vs_fp32 = c.loss_diff_vs_fp32 = c.hg_over_torch = c.torch_speedup_vs_fp32 = c.loss_diff_vs_torch = kNaN;
    const CellResult* base = nullptr;
    for (const auto& b : cells)
      if (b.model == c.model && b.device == c.device && b.precision == "fp32") base = &b;
    if (base && base->hg.ok() && c.hg.ok()) {
      c.speedup_vs_fp32 = base->hg.step_ms.median / c.hg.step_ms.median;
      c.loss_diff_vs_fp32 = c.hg.final_loss - base->hg.final_loss;
    }
    if (c.torch && c.torch->ok() && c.hg.ok()) {
      c.hg_over_torch = c.hg.step_ms.median / c.torch->step_ms.median;
      if (c.torch->steps == c.hg.steps) c.loss_diff_vs_torch = c.hg.final_loss - c.torch->final_loss;
    }
    if (base && base->torch && base->torch->ok() && c.torch && c.torch->ok())
      c.torch_speedup_vs_fp32 = base->torch->step_ms.median / c.torch->step_ms.median;
  }
}

std::string format_ms(double ms) {
  if (!std::isfinite(ms)) return "-";
  if (ms >= 100) return fmt::format("{:.0f}", ms);
  if (ms >= 10) return fmt::format("{:.1f}", ms);
  if (ms >= 1) return fmt::format("{:.2f}", ms);
  return fmt::format("{:.3f}", ms);
}

namespace {

std::string fmt_or_dash(double v, const char* spec) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-";
}

std::string mib(int64_t bytes) {
  return bytes > 0 ? fmt::format("{:.0f}", static_cast<double>(bytes) / (1 << 20)) : "-";
}

std::string torch_cell(const CellResult& c) {
  if (!c.torch) return "-";
  if (!c.torch->ok()) return c.torch->status;
  return format_ms(c.torch->step_ms.median);
}

}  // namespace

void print_table(std::FILE* out, const RunInfo& info, const Options& o, const std::vector<CellResult>& cells) {
  fmt::print(out, "amp_bench  {}  {} ({} hardware threads, {} used)  load {:.2f} {:.2f} {:.2f}\n", info.date,
             info.cpu_model, info.cores, info.threads, info.load_start[0], info.load_start[1], info.load_start[2]);
  fmt::print(out, "CPU paths: {}\n", info.cpu_paths);
  fmt::print(out, "{} data, {} warm-up + {} timed steps per cell, SGD lr {} momentum {}, seed {}\n", info.data,
             o.warmup, o.steps, o.lr, o.momentum, o.seed);
  if (o.rounds > 1)
    fmt::print(out,
               "{} rounds, each halfgrad's cells then PyTorch's: times are medians over the rounds of each round's "
               "figure; x fp32 and hg/torch are medians of ratios taken within a round (all rounds below the "
               "table)\n",
               o.rounds);
  if (info.load_start[0] > 0.75 * info.cores)
    fmt::print(out,
               "WARNING: load average {:.1f} on {} hardware threads: other programs compete for the CPU, so absolute "
               "times are inflated and noisy\n(multi-threaded PyTorch suffers most); trust the ratios more, or rerun "
               "on an idle machine, or with --threads 1.\n",
               info.load_start[0], info.cores);
  fmt::print(out, "PyTorch: {}\n\n",
             info.torch.available ? fmt::format("{} ({})", info.torch.version, info.torch.python)
                                  : "not run: " + info.torch.note);
  const auto header =
      fmt::format("{:<10} {:<5} {:<4} {:>5} {:>9} {:>8} {:>15} {:>10} {:>7} {:>6} {:>6} {:>8} {:>9} {:>9} {:>8} {:>9}",
                  "model", "prec", "dev", "batch", "median ms", "graph ms", "p10-p90 ms", "samples/s", "mem MiB",
                  "GF/s", "x fp32", "loss", "d loss", "torch ms", "hg/torch", "d torch");
  fmt::print(out, "{}\n{}\n", header, std::string(header.size(), '-'));
  for (const auto& c : cells) {
    if (!c.hg.ok()) {
      fmt::print(out, "{:<10} {:<5} {:<4} {:>5} {}: {}\n", c.model, c.precision, c.device, c.batch, c.hg.status,
                 c.hg.note);
      continue;
    }
    const auto& r = c.hg;
    fmt::print(
        out,
        "{:<10} {:<5} {:<4} {:>5} {:>9} {:>8} {:>15} {:>10.0f} {:>7} {:>6.1f} {:>6} {:>8.4f} {:>9} {:>9} {:>8} {:>9}\n",
        c.model, c.precision, c.device, c.batch, format_ms(r.step_ms.median),
        std::isfinite(r.graph_ms) ? format_ms(r.graph_ms) : std::string("-"),
        format_ms(r.step_ms.p10) + "-" + format_ms(r.step_ms.p90), r.samples_per_s,
        mib(c.device == "cpu" ? r.cell_bytes : r.peak_bytes), c.flops_per_step / (r.step_ms.median * 1e6),
        fmt_or_dash(c.speedup_vs_fp32, "{:.2f}"), r.final_loss, fmt_or_dash(c.loss_diff_vs_fp32, "{:+.1e}"),
        torch_cell(c), fmt_or_dash(c.hg_over_torch, "{:.2f}"), fmt_or_dash(c.loss_diff_vs_torch, "{:+.1e}"));
    if (c.precision == "fp8" && !r.note.empty()) fmt::print(out, "{:<10} {:<5} {:<4} note: {}\n", "", "", "", r.note);
  }
  fmt::print(
      out,
      "\nmedian, p10, p90: of the timed steps. graph: the median step captured in a CUDA graph and replayed (CUDA "
      "only). mem: CPU: peak resident set growth during the cell; CUDA: "
      "allocator peak.\nGF/s: the FLOP count of a training step (3 x forward matmuls/convs) over the "
      "median. loss: float32 loss on batch 0 after the run;\nd loss: minus fp32's (same seed, same data). "
      "hg/torch < 1: halfgrad is faster.\nd torch: halfgrad's loss minus PyTorch's (same weights, data, steps).\n");
  for (const auto& c : cells) {
    if (c.torch && !c.torch->ok())
      fmt::print(out, "torch {} {} {}: {}: {}\n", c.model, c.precision, c.device, c.torch->status, c.torch->note);
    else if (c.torch && !c.torch->note.empty())
      fmt::print(out, "torch {} {} {}: {}\n", c.model, c.precision, c.device, c.torch->note);
  }
  print_gpt2(out, cells);
  for (const auto& n : info.notes) fmt::print(out, "note: {}\n", n);
  if (o.rounds > 1) print_rounds(out, cells);
}

double tokens_per_s(const CellResult& c, const SideResult& r) {
  return r.ok() && c.tokens_per_step > 0 ? static_cast<double>(c.tokens_per_step) / (r.step_ms.median / 1000.0) : kNaN;
}

double mfu(const CellResult& c, const SideResult& r) {
  return r.ok() ? c.flops_per_step / (r.step_ms.median * 1e6) / c.peak_gflops : kNaN;
}

void print_gpt2(std::FILE* out, const std::vector<CellResult>& cells) {
  bool header = false;
  for (const auto& c : cells) {
    if (c.model != "gpt2" || !c.hg.ok()) continue;
    if (!header) {
      fmt::print(out,
                 "\ngpt2: tokens/s and MFU, llm.c's count (6N + 6LCT FLOP a token) over the median step, against "
                 "the peak named:\n");
      header = true;
    }
    const double hg_mfu = mfu(c, c.hg);
    std::string line =
        fmt::format("gpt2 {:<5} {:<4} {} tokens/step: halfgrad {:.0f} tokens/s, {:.1f} GFLOP/s", c.precision, c.device,
                    c.tokens_per_step, tokens_per_s(c, c.hg), c.flops_per_step / (c.hg.step_ms.median * 1e6));
    if (std::isfinite(hg_mfu)) line += fmt::format(", MFU {:.1f}%", 100 * hg_mfu);
    if (c.torch && c.torch->ok()) {
      line += fmt::format("; PyTorch {:.0f} tokens/s", tokens_per_s(c, *c.torch));
      if (std::isfinite(c.peak_gflops)) line += fmt::format(", MFU {:.1f}%", 100 * mfu(c, *c.torch));
    }
    if (std::isfinite(c.peak_gflops)) {
      line += fmt::format("; peak {:.0f} GFLOP/s ({})", c.peak_gflops, c.peak_source);
      // On the CPU: how far the step is from its FLOP count run at the GEMM's own rate.
      if (c.device == "cpu") line += fmt::format(", step = {:.2f}x its FLOPs at that rate", 1.0 / hg_mfu);
    }
    fmt::print(out, "{}\n", line);
  }
}

void print_rounds(std::FILE* out, const std::vector<CellResult>& cells) {
  fmt::print(out, "\nper round (median ms, halfgrad / PyTorch, and hg/torch):\n");
  for (const auto& c : cells) {
    std::string line = fmt::format("{:<10} {:<5} {:<4}", c.model, c.precision, c.device);
    for (const RoundFigures& f : c.rounds)
      line += fmt::format("  {} / {} = {}", format_ms(f.hg_median_ms), format_ms(f.torch_median_ms),
                          fmt_or_dash(f.hg_over_torch, "{:.2f}"));
    fmt::print(out, "{}\n", line);
  }
}

namespace {

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json side_json(const SideResult& r) {
  nlohmann::json j = {{"status", r.status}, {"note", r.note}};
  if (!r.ok()) return j;
  j["steps"] = r.steps;
  j["step_ms"] = {{"median", r.step_ms.median}, {"p10", r.step_ms.p10}, {"p90", r.step_ms.p90},
                  {"mean", r.step_ms.mean},     {"min", r.step_ms.min}, {"max", r.step_ms.max}};
  j["samples_per_s"] = r.samples_per_s;
  j["final_loss"] = number_or_null(r.final_loss);
  j["peak_bytes"] = r.peak_bytes;
  j["cell_bytes"] = r.cell_bytes;
  j["allocs_per_step"] = number_or_null(r.allocs_per_step);
  j["graph_step_ms"] = number_or_null(r.graph_ms);
  return j;
}

}  // namespace

nlohmann::json to_json(const RunInfo& info, const Options& o, const std::vector<CellResult>& cells) {
  nlohmann::json j;
  j["tool"] = "amp_bench";
  j["schema"] = 1;
  j["date"] = info.date;
  j["command"] = info.command;
  j["machine"] = {{"cpu_model", info.cpu_model},
                  {"cpu_paths", info.cpu_paths},
                  {"hardware_threads", info.cores},
                  {"threads", info.threads},
                  {"load_average_start", {info.load_start[0], info.load_start[1], info.load_start[2]}},
                  {"load_average_end", {info.load_end[0], info.load_end[1], info.load_end[2]}}};
  j["settings"] = {{"steps", o.steps},
                   {"warmup", o.warmup},
                   {"rounds", o.rounds},
                   {"batch", o.batch},
                   {"wide_batch_cpu", o.wide_batch_cpu},
                   {"wide_batch_cuda", o.wide_batch_cuda},
                   {"gpt2_cpu", o.gpt2_cpu},
                   {"gpt2_cuda", o.gpt2_cuda},
                   {"gpt2_lr", o.gpt2_lr},
                   {"gpu_peak_tflops", o.gpu_peak_tflops},
                   {"torch_compile", o.torch_compile},
                   {"seed", o.seed},
                   {"lr", o.lr},
                   {"momentum", o.momentum},
                   {"data", info.data}};
  j["torch"] = {{"available", info.torch.available},
                {"python", info.torch.python},
                {"version", info.torch.version},
                {"note", info.torch.note}};
  j["notes"] = info.notes;
  j["results"] = nlohmann::json::array();
  for (const auto& c : cells) {
    nlohmann::json e = {{"model", c.model},
                        {"precision", c.precision},
                        {"device", c.device},
                        {"batch", c.batch},
                        {"flops_per_step", c.flops_per_step},
                        {"tokens_per_step", c.tokens_per_step},
                        {"peak_gflops", number_or_null(c.peak_gflops)},
                        {"peak_source", c.peak_source},
                        {"halfgrad", side_json(c.hg)},
                        {"speedup_vs_fp32", number_or_null(c.speedup_vs_fp32)},
                        {"loss_diff_vs_fp32", number_or_null(c.loss_diff_vs_fp32)},
                        {"hg_over_torch", number_or_null(c.hg_over_torch)},
                        {"torch_speedup_vs_fp32", number_or_null(c.torch_speedup_vs_fp32)},
                        {"loss_diff_vs_torch", number_or_null(c.loss_diff_vs_torch)}};
    e["torch"] = c.torch ? side_json(*c.torch) : nlohmann::json(nullptr);
    if (c.tokens_per_step > 0) {
      e["halfgrad"]["tokens_per_s"] = number_or_null(tokens_per_s(c, c.hg));
      e["halfgrad"]["mfu"] = number_or_null(mfu(c, c.hg));
      if (c.torch) {
        e["torch"]["tokens_per_s"] = number_or_null(tokens_per_s(c, *c.torch));
        e["torch"]["mfu"] = number_or_null(mfu(c, *c.torch));
      }
    }
    e["rounds"] = nlohmann::json::array();
    for (const RoundFigures& f : c.rounds)
      e["rounds"].push_back({{"halfgrad_median_ms", number_or_null(f.hg_median_ms)},
                             {"torch_median_ms", number_or_null(f.torch_median_ms)},
                             {"speedup_vs_fp32", number_or_null(f.speedup_vs_fp32)},
                             {"hg_over_torch", number_or_null(f.hg_over_torch)},
                             {"torch_speedup_vs_fp32", number_or_null(f.torch_speedup_vs_fp32)}});
    j["results"].push_back(e);
  }
  return j;
}

void write_png(const std::string& path, const RunInfo& info, const std::vector<CellResult>& cells) {
  namespace fs = std::filesystem;
  // Rows: one per model and device; columns: each (framework, precision) series that has data.
  std::vector<std::string> rows, series;
  std::map<std::pair<std::string, std::string>, double> value;
  auto add_series = [&](const std::string& s) {
    if (std::find(series.begin(), series.end(), s) == series.end()) series.push_back(s);
  };
  for (const auto& c : cells) {
    const std::string row = c.model + (c.device == "cpu" ? "" : " (" + c.device + ")");
    if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
    if (c.hg.ok()) {
      add_series("halfgrad " + c.precision);
      value[{row, "halfgrad " + c.precision}] = c.hg.step_ms.median;
    }
  }
  for (const auto& c : cells) {
    const std::string row = c.model + (c.device == "cpu" ? "" : " (" + c.device + ")");
    if (c.torch && c.torch->ok()) {
      add_series("PyTorch " + c.precision);
      value[{row, "PyTorch " + c.precision}] = c.torch->step_ms.median;
    }
  }
  if (series.empty()) throw hg::Error("[amp_bench] --png: no cell has a result to draw");

  const fs::path dir = fs::temp_directory_path() / fmt::format("amp_bench_{}", ::getpid());
  fs::create_directories(dir);
  {
    std::ofstream dat(dir / "steps.dat");
    dat << "model";
    for (const auto& s : series) dat << "\t\"" << s << "\"";
    dat << "\n";
    for (const auto& r : rows) {
      dat << '"' << r << '"';
      for (const auto& s : series) {
        auto it = value.find({r, s});
        dat << '\t' << (it == value.end() ? std::string("?") : fmt::format("{:.6g}", it->second));
      }
      dat << "\n";
    }
    std::ofstream gp(dir / "chart.gp");
    // Titles in double quotes (so \n is a line break); noenhanced keeps "mnist_mlp" literal.
    gp << "set terminal pngcairo noenhanced size 1200,650 font 'sans,10'\n"
       << "set output '" << fs::absolute(path).string() << "'\n"
       << "set title \"amp_bench: median training step time, lower is better (" << info.date << ")\\n"
       << info.cpu_model << ", " << info.threads << " threads, " << info.data << " data, load "
       << fmt::format("{:.1f}", info.load_start[0]) << "\"\n"
       << "set ylabel 'ms per step (log scale)'\nset logscale y\nset grid ytics\n"
       << "set style data histograms\nset style histogram clustered gap 1\n"
       << "set style fill solid 0.85 border -1\nset boxwidth 0.9\nset datafile missing '?'\n"
       << "set key outside right top\nset xtics nomirror\n"
       << "plot ";
    // One colour per precision; PyTorch's bars are hatched in the same colour.
    const std::map<std::string, std::string> colour = {
        {"fp32", "#4C72B0"}, {"bf16", "#55A868"}, {"fp16", "#C44E52"}, {"tf32", "#8172B2"}, {"fp8", "#DD8452"}};
    for (size_t i = 0; i < series.size(); ++i) {
      const bool torch = series[i].rfind("PyTorch", 0) == 0;
      const std::string precision = series[i].substr(series[i].find(' ') + 1);
      gp << (i ? ", " : "") << "'" << (dir / "steps.dat").string() << "' using " << i + 2 << (i == 0 ? ":xtic(1)" : "")
         << " title columnheader lc rgb '" << colour.at(precision) << "'" << (torch ? " fill pattern 4" : "");
    }
    gp << "\n";
  }
  const std::string cmd = fmt::format("gnuplot '{}' 2>&1", (dir / "chart.gp").string());
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fs::remove_all(dir);
    throw hg::Error("[amp_bench] --png needs gnuplot (Debian: apt install gnuplot-nox, or bash tools/setup-debian.sh)");
  }
  const int rc = std::system(cmd.c_str());
  fs::remove_all(dir);
  if (rc != 0) throw hg::Error(fmt::format("[amp_bench] gnuplot failed (status {}) drawing {}", rc, path));
}

}  // namespace amp_bench
