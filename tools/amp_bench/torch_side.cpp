// Running the PyTorch script and reading its answer.
#include "torch_side.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include <halfgrad.h>

namespace amp_bench {

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command, returning its exit status and what it printed on stdout.
std::pair<int, std::string> capture(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::optional<std::string> torch_version(const std::string& python) {
  const auto [rc, out] =
      capture(shell_quote(python) + " -c 'import torch; print(torch.__version__)' 2>/dev/null </dev/null");
  if (rc != 0 || out.empty()) return std::nullopt;
  return out.substr(0, out.find_last_not_of("\r\n") + 1);
}

}  // namespace

TorchInfo find_torch(const std::string& explicit_python, const std::string& script) {
  TorchInfo info;
  info.script = script;
  if (!std::filesystem::exists(script)) {
    info.note = fmt::format("the PyTorch script {} is missing (pass --torch-script)", script);
    return info;
  }
  const std::vector<std::string> candidates = explicit_python.empty()
                                                  ? std::vector<std::string>{"/usr/bin/python3", "python3"}
                                                  : std::vector<std::string>{explicit_python};
  for (const auto& python : candidates) {
    if (auto version = torch_version(python)) {
      info.available = true;
      info.python = python;
      info.version = *version;
      return info;
    }
  }
  info.note = explicit_python.empty() ? "no python found that can `import torch` (tried /usr/bin/python3, python3; "
                                        "Debian: apt install python3-torch)"
                                      : fmt::format("{} cannot `import torch`", explicit_python);
  return info;
}

std::vector<std::string> torch_arguments(const Options& o, int threads, const std::vector<std::string>& devices) {
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
  };
  std::vector<std::string> precisions = o.precisions;
  std::erase(precisions, "fp8");  // PyTorch has no fp8 autocast: the fp8 cells have no PyTorch side
  std::vector<std::string> args = {"--models",
                                   join(o.models),
                                   "--precisions",
                                   join(precisions),
                                   "--devices",
                                   join(devices),
                                   "--steps",
                                   std::to_string(o.steps),
                                   "--warmup",
                                   std::to_string(o.warmup),
                                   "--batch",
                                   std::to_string(o.batch),
                                   "--wide-batch-cpu",
                                   std::to_string(o.wide_batch_cpu),
                                   "--wide-batch-cuda",
                                   std::to_string(o.wide_batch_cuda),
                                   "--threads",
                                   std::to_string(threads),
                                   "--seed",
                                   std::to_string(o.seed),
                                   "--lr",
                                   fmt::format("{}", o.lr),
                                   "--momentum",
                                   fmt::format("{}", o.momentum),
                                   "--max-seconds",
                                   fmt::format("{}", o.torch_max_seconds),
                                   "--resnet-batch-cpu",
                                   std::to_string(o.resnet_batch_cpu),
                                   "--resnet-batch-cuda",
                                   std::to_string(o.resnet_batch_cuda),
                                   "--resnet-cpu",
                                   o.resnet_cpu,
                                   "--resnet-cuda",
                                   o.resnet_cuda,
                                   "--gpt2-cpu",
                                   o.gpt2_cpu,
                                   "--gpt2-cuda",
                                   o.gpt2_cuda,
                                   "--gpt2-lr",
                                   fmt::format("{}", o.gpt2_lr)};
  if (o.torch_compile) args.push_back("--compile");
  if (!o.resnet_channels_last) args.push_back("--no-channels-last");
  if (o.resnet_cpu_channels_last) args.push_back("--cpu-channels-last");
  if (o.real_data) {
    args.push_back("--real-data");
    args.push_back("--data");
    args.push_back(o.data);
  }
  return args;
}

nlohmann::json run_torch(const TorchInfo& info, const std::vector<std::string>& arguments) {
  std::string command = shell_quote(info.python) + " " + shell_quote(info.script);
  for (const auto& a : arguments) {
    command += ' ';
    command += shell_quote(a);
  }
  command += " </dev/null";
  const auto [rc, out] = capture(command);
  if (rc != 0) throw hg::Error(fmt::format("[amp_bench] the PyTorch script exited with status {}", rc));
  try {
    return nlohmann::json::parse(out);
  } catch (const nlohmann::json::exception& e) {
    throw hg::Error(fmt::format("[amp_bench] the PyTorch script printed no valid JSON: {}", e.what()));
  }
}

SideResult side_from_json(const nlohmann::json& e) {
  SideResult r;
  r.status = e.value("status", "error");
  r.note = e.value("note", "");
  if (!r.ok()) return r;
  const auto& ms = e.at("step_ms");
  r.step_ms.median = ms.at("median").get<double>();
  r.step_ms.p10 = ms.at("p10").get<double>();
  r.step_ms.p90 = ms.at("p90").get<double>();
  r.step_ms.mean = ms.value("mean", kNaN);
  r.step_ms.min = ms.value("min", kNaN);
  r.step_ms.max = ms.value("max", kNaN);
  r.steps = e.at("steps").get<int64_t>();
  r.step_ms.count = static_cast<int>(r.steps);
  r.samples_per_s = e.at("samples_per_s").get<double>();
  r.final_loss = e.at("final_loss").is_number() ? e.at("final_loss").get<double>() : kNaN;
  r.peak_bytes = e.value("peak_bytes", int64_t{0});
  r.cell_bytes = e.value("cell_bytes", int64_t{0});
  return r;
}

void merge_torch(const nlohmann::json& torch_json, std::vector<CellResult>& cells) {
  for (const auto& e : torch_json.at("results")) {
    for (auto& cell : cells) {
      // Compare as strings: with C++20's reversed operators, string == json is ambiguous on
      // some compilers (gcc 13 with nlohmann 3.11).
      const auto field = [&e](const char* key) { return e.at(key).get<std::string>(); };
      if (cell.model == field("model") && cell.precision == field("precision") && cell.device == field("device")) {
        try {
          cell.torch = side_from_json(e);
        } catch (const nlohmann::json::exception& ex) {
          cell.torch = SideResult{};
          cell.torch->status = "error";
          cell.torch->note = std::string("unreadable PyTorch result: ") + ex.what();
        }
      }
    }
  }
}

}  // namespace amp_bench
