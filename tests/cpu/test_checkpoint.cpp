// A full training checkpoint (model, optimizer, GradScaler, epoch) resumes exactly: the losses
// after resuming equal those of an uninterrupted run, bit for bit.
#include <filesystem>

#include "nn_helpers.h"

using namespace hg;

namespace {

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(8, 1)});
}

data::TensorDataset make_data() {
  manual_seed(5);
  Tensor x = randn({40, 3});
  Tensor y = (x * tensor(std::vector<float>{1.0f, -2.0f, 0.5f})).sum({1}, true) + 0.3;
  return data::TensorDataset{x, y};
}

// A scaler whose scale sits where scaled gradients overflow float32: some steps are skipped
// and the scale backs off and grows again, so a resumed run only matches an uninterrupted one
// when the scale and its growth tracker come back exactly.
amp::GradScaler make_scaler() {
  return amp::GradScaler(kCPU, {.init_scale = std::ldexp(1.0, 126), .growth_interval = 2});
}

// Trains epochs [from, to) and returns each step's loss; counts the steps the scaler skipped.
template <class Opt>
std::vector<float> train(nn::Module& model, Opt& opt, data::DataLoader& loader, int64_t from, int64_t to,
                         amp::GradScaler& scaler, int* skipped = nullptr) {
  std::vector<float> losses;
  for (int64_t e = from; e < to; ++e) {
    loader.set_epoch(e);
    for (TensorList batch : loader) {
      opt.zero_grad();
      Tensor d = model(batch[0]) - batch[1];
      Tensor loss = (d * d).mean();
      scaler.scale(loss).backward();
      const double before = scaler.get_scale();
      scaler.step(opt);
      scaler.update();
      if (skipped != nullptr && scaler.get_scale() < before) ++*skipped;
      losses.push_back(loss.item<float>());
    }
  }
  return losses;
}

template <class Opt, class Options>
void check_resume(Options options, bool scaled = false) {
  const auto path =
      (std::filesystem::temp_directory_path() / fmt::format("hg_resume_{}.safetensors", ::getpid())).string();
  const data::DataLoaderOptions lo{.batch_size = 8, .shuffle = true, .seed = 3};

  // A disabled scaler passes everything through.
  const auto scaler_for = [&] { return scaled ? make_scaler() : amp::GradScaler(kCPU, {.enabled = false}); };
  auto full_model = make_model();
  Opt full_opt(full_model->parameters(), options);
  data::DataLoader full_loader(make_data(), lo);
  auto full_scaler = scaler_for();
  int skipped = 0;
  const auto full = train(*full_model, full_opt, full_loader, 0, 3, full_scaler, &skipped);
  if (scaled) CHECK(skipped >= 2);  // the test means something only when steps were skipped

  // Two epochs, save, then a fresh model, optimizer and loader pick up at epoch 2.
  auto first = make_model();
  Opt first_opt(first->parameters(), options);
  data::DataLoader first_loader(make_data(), lo);
  auto first_scaler = scaler_for();
  auto losses = train(*first, first_opt, first_loader, 0, 2, first_scaler);
  StateDict ck = with_prefix(first->state_dict(), "model.");
  for (auto& [k, v] : with_prefix(first_opt.state_dict(), "optim.")) ck[k] = v;
  for (auto& [k, v] : with_prefix(first_scaler.state_dict(), "scaler.")) ck[k] = v;
  ck["epoch"] = scalar_tensor(2, kInt64);
  save(ck, path);

  manual_seed(999);  // a different init, overwritten by the checkpoint
  auto resumed = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 8), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(8, 1)});
  Opt resumed_opt(resumed->parameters(), options);
  const StateDict back = load(path);
  resumed->load_state_dict(strip_prefix(back, "model."));
  resumed_opt.load_state_dict(strip_prefix(back, "optim."));
  amp::GradScaler resumed_scaler(kCPU, {.enabled = scaled});  // default scale until loaded
  resumed_scaler.load_state_dict(strip_prefix(back, "scaler."));
  if (scaled) CHECK(resumed_scaler.get_scale() == first_scaler.get_scale());
  const int64_t epoch = back.at("epoch").item<int64_t>();
  CHECK(epoch == 2);
  data::DataLoader resumed_loader(make_data(), lo);
  const auto rest = train(*resumed, resumed_opt, resumed_loader, epoch, 3, resumed_scaler);
  losses.insert(losses.end(), rest.begin(), rest.end());
  CHECK(losses == full);
  CHECK(resumed->state_dict().at("2.weight").to_vector<float>() ==
        full_model->state_dict().at("2.weight").to_vector<float>());
  std::filesystem::remove(path);
}

}  // namespace

TEST_CASE("resuming from a checkpoint gives the same losses as an uninterrupted run") {
  SUBCASE("SGD with momentum") { check_resume<optim::SGD>(optim::SGDOptions{.lr = 0.05, .momentum = 0.9}); }
  SUBCASE("Adam with amsgrad") { check_resume<optim::Adam>(optim::AdamOptions{.lr = 0.01, .amsgrad = true}); }
  SUBCASE("AdamW") { check_resume<optim::AdamW>(optim::AdamWOptions{}); }
  SUBCASE("SGD with a GradScaler that skips steps") {
    check_resume<optim::SGD>(optim::SGDOptions{.lr = 0.05, .momentum = 0.9}, true);
  }
}
