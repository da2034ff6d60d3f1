// A full training checkpoint (model, optimizer, GradScaler, epoch, and the generator's state for
// dropout) resumes exactly: the losses after resuming equal those of an uninterrupted run, bit
// for bit.
#include <filesystem>

#include "nn_helpers.h"

using namespace hg;

namespace {

std::shared_ptr<nn::Sequential> layers(bool dropout) {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(3, 8)).push_back(std::make_shared<nn::GELU>());
  if (dropout) model->push_back(std::make_shared<nn::Dropout>(0.3));
  model->push_back(std::make_shared<nn::Linear>(8, 1));
  return model;
}

std::shared_ptr<nn::Sequential> make_model(bool dropout) {
  manual_seed(11);
  return layers(dropout);
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

// With `dropout`, the checkpoint carries the generator's state; `restore_rng` false leaves it out
// on resuming, and the losses must then differ (the control that shows the state matters).
template <class Opt, class Options>
void check_resume(Options options, bool scaled = false, bool dropout = false, bool restore_rng = true) {
  const auto path =
      (std::filesystem::temp_directory_path() / fmt::format("hg_resume_{}.safetensors", ::getpid())).string();
  const data::DataLoaderOptions lo{.batch_size = 8, .shuffle = true, .seed = 3};

  // A disabled scaler passes everything through.
  const auto scaler_for = [&] { return scaled ? make_scaler() : amp::GradScaler(kCPU, {.enabled = false}); };
  auto full_model = make_model(dropout);
  Opt full_opt(full_model->parameters(), options);
  data::DataLoader full_loader(make_data(), lo);
  auto full_scaler = scaler_for();
  int skipped = 0;
  const auto full = train(*full_model, full_opt, full_loader, 0, 3, full_scaler, &skipped);
  if (scaled) CHECK(skipped >= 2);  // the test means something only when steps were skipped

  // Two epochs, save, then a fresh model, optimizer and loader pick up at epoch 2.
  auto first = make_model(dropout);
  Opt first_opt(first->parameters(), options);
  data::DataLoader first_loader(make_data(), lo);
  auto first_scaler = scaler_for();
  auto losses = train(*first, first_opt, first_loader, 0, 2, first_scaler);
  StateDict ck = with_prefix(first->state_dict(), "model.");
  for (auto& [k, v] : with_prefix(first_opt.state_dict(), "optim.")) ck[k] = v;
  for (auto& [k, v] : with_prefix(first_scaler.state_dict(), "scaler.")) ck[k] = v;
  ck["epoch"] = scalar_tensor(2, kInt64);
  ck["rng"] = get_rng_state();
  save(ck, path);

  manual_seed(999);  // a different init and generator, overwritten by the checkpoint
  auto resumed = layers(dropout);
  Opt resumed_opt(resumed->parameters(), options);
  const StateDict back = load(path);
  resumed->load_state_dict(strip_prefix(back, "model."));
  resumed_opt.load_state_dict(strip_prefix(back, "optim."));
  amp::GradScaler resumed_scaler(kCPU, {.enabled = scaled});  // default scale until loaded
  resumed_scaler.load_state_dict(strip_prefix(back, "scaler."));
  if (scaled) CHECK(resumed_scaler.get_scale() == first_scaler.get_scale());
  const int64_t epoch = back.at("epoch").item<int64_t>();
  CHECK(epoch == 2);
  data::DataLoader resumed_loader(make_data(), lo);  // (make_data seeds the generator: restore it after)
  if (restore_rng) set_rng_state(back.at("rng"));
  const auto rest = train(*resumed, resumed_opt, resumed_loader, epoch, 3, resumed_scaler);
  losses.insert(losses.end(), rest.begin(), rest.end());
  std::filesystem::remove(path);
  if (!restore_rng) {
    CHECK(losses != full);
    return;
  }
  CHECK(losses == full);
  const std::string last = dropout ? "3.weight" : "2.weight";
  CHECK(resumed->state_dict().at(last).to_vector<float>() == full_model->state_dict().at(last).to_vector<float>());
}

}  // namespace

TEST_CASE("resuming from a checkpoint gives the same losses as an uninterrupted run") {
  SUBCASE("SGD with momentum") { check_resume<optim::SGD>(optim::SGDOptions{.lr = 0.05, .momentum = 0.9}); }
  SUBCASE("Adam with amsgrad") { check_resume<optim::Adam>(optim::AdamOptions{.lr = 0.01, .amsgrad = true}); }
  SUBCASE("AdamW") { check_resume<optim::AdamW>(optim::AdamWOptions{}); }
  SUBCASE("SGD with a GradScaler that skips steps") {
    check_resume<optim::SGD>(optim::SGDOptions{.lr = 0.05, .momentum = 0.9}, true);
  }
  SUBCASE("AdamW with dropout, the generator's state restored") {
    check_resume<optim::AdamW>(optim::AdamWOptions{}, false, true);
  }
  SUBCASE("control: with dropout and without the generator's state, the runs differ") {
    check_resume<optim::AdamW>(optim::AdamWOptions{}, false, true, false);
  }
}

TEST_CASE("the generator's state: the same draws after set_rng_state, bad states refused") {
  manual_seed(4);
  (void)randn({5});
  const Tensor state = get_rng_state();
  CHECK(state.dtype() == kUInt8);
  CHECK(state.dim() == 1);
  auto draws = [] {
    const Tensor u = rand({7}), n = randn({5}), i = randint(0, 1000, {6});
    const Tensor d = dropout(ones({64}), 0.5, true);
    return std::vector<double>{u.sum().item<double>(), n.sum().item<double>(), i.sum().item<double>(),
                               d.sum().item<double>(), static_cast<double>(random_u64() % 1000003)};
  };
  const auto first = draws();
  CHECK(draws() != first);
  set_rng_state(state);
  CHECK(draws() == first);

  // Refused, the generator untouched: after each refusal the next draws are those after `state`.
  std::vector<uint8_t> bytes = state.to_vector<uint8_t>();
  std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<int64_t>(bytes.size() / 2));
  std::vector<uint8_t> garbage = bytes;
  garbage.insert(garbage.end(), {'x', '1'});
  std::vector<uint8_t> untagged = bytes;
  untagged[0] = 'X';
  set_rng_state(state);
  for (const auto& bad : {truncated, garbage, untagged})
    CHECK_THROWS_WITH_AS(set_rng_state(tensor(bad)), doctest::Contains("[set_rng_state]"), Error);
  CHECK_THROWS_WITH_AS(set_rng_state(state.to(kFloat32)), doctest::Contains("expected the 1-d uint8 tensor"), Error);
  CHECK_THROWS_WITH_AS(set_rng_state(Tensor()), doctest::Contains("undefined"), Error);
  CHECK(draws() == first);
}

TEST_CASE("InferenceModeGuard: no graph inside, the previous modes after, nestable") {
  Tensor w = ones({3}).requires_grad_();
  CHECK_FALSE(is_inference_mode_enabled());
  {
    InferenceModeGuard guard;
    CHECK(is_inference_mode_enabled());
    CHECK_FALSE(GradMode::is_enabled());
    CHECK_FALSE((w * 2.0).requires_grad());
    {
      InferenceModeGuard off(false);
      CHECK_FALSE(is_inference_mode_enabled());
    }
    CHECK(is_inference_mode_enabled());
  }
  CHECK_FALSE(is_inference_mode_enabled());
  CHECK(GradMode::is_enabled());
  CHECK((w * 2.0).requires_grad());
  {
    NoGradGuard no_grad;
    { InferenceModeGuard guard; }
    CHECK_FALSE(GradMode::is_enabled());  // the enclosing NoGradGuard's mode comes back
  }
}
