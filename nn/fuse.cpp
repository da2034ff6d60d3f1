#include "nn/fuse.h"

#include <fmt/format.h>

#include "nn/sequential.h"

namespace hg::nn {

std::vector<std::string> fuse(Module& model) {
  std::vector<std::string> fused;
  for (const auto& [name, module] : model.named_modules()) {
    auto* seq = dynamic_cast<Sequential*>(module);
    if (!seq) continue;
    for (const std::string& run : seq->fuse()) fused.push_back(fmt::format("{}: {}", name, run));
  }
  return fused;
}

}  // namespace hg::nn
