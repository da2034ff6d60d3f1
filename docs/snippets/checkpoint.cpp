// A full training checkpoint in one safetensors file: model, optimizer and GradScaler.
#include <halfgrad.h>

#include <filesystem>

namespace {
void save_checkpoint(const std::string& path, const hg::nn::Module& model, const hg::optim::Optimizer& opt,
                     const hg::amp::GradScaler& scaler) {
  hg::StateDict all = hg::with_prefix(model.state_dict(), "model.");
  for (auto& [key, t] : hg::with_prefix(opt.state_dict(), "optim.")) all[key] = t;
  for (auto& [key, t] : hg::with_prefix(scaler.state_dict(), "scaler.")) all[key] = t;
  hg::save(all, path, {{"format", "my-training-checkpoint"}});  // metadata: string pairs
}

void load_checkpoint(const std::string& path, hg::nn::Module& model, hg::optim::Optimizer& opt,
                     hg::amp::GradScaler& scaler) {
  const hg::StateDict all = hg::load(path);
  model.load_state_dict(hg::strip_prefix(all, "model."));
  opt.load_state_dict(hg::strip_prefix(all, "optim."));
  scaler.load_state_dict(hg::strip_prefix(all, "scaler."));
}
}  // namespace

int main() {
  hg::manual_seed(0);
  const std::string path = (std::filesystem::temp_directory_path() / "halfgrad_guide_checkpoint.safetensors").string();
  hg::nn::Linear model(3, 2);
  hg::optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  hg::amp::GradScaler scaler(hg::kCPU);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    scaler.scale(model(hg::randn({4, 3})).pow(2.0).mean()).backward();
    scaler.step(opt);
    scaler.update();
  }
  save_checkpoint(path, model, opt, scaler);

  hg::nn::Linear restored(3, 2);
  hg::optim::SGD restored_opt(restored.parameters(), {.lr = 0.5});
  hg::amp::GradScaler restored_scaler(hg::kCPU);
  load_checkpoint(path, restored, restored_opt, restored_scaler);
  HG_CHECK(restored.weight.to_vector<float>() == model.weight.to_vector<float>(), "guide", "weights restored");
  HG_CHECK(restored_opt.lr() == 0.1 && restored_opt.steps() == 3, "guide", "optimizer restored");
  HG_CHECK(restored_scaler.get_scale() == scaler.get_scale(), "guide", "scaler restored");
  std::filesystem::remove(path);
}
