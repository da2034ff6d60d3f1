// Weight tying as PyTorch users write it (head->weight = emb->weight): one parameter under its
// first name, saved once, loaded from a file with either name or both, kept tied by to().
#include <cmath>
#include <filesystem>

#include "nn_helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// A GPT-style model whose output projection is the embedding matrix.
struct Tied : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(5, 3));
  std::shared_ptr<nn::Linear> body = register_module("body", std::make_shared<nn::Linear>(3, 3));
  std::shared_ptr<nn::Linear> head =
      register_module("head", std::make_shared<nn::Linear>(3, 5, nn::LinearOptions{.bias = false}));
  Tied() : Module("Tied") { head->weight = emb->weight; }
  Tensor forward(const Tensor& idx) override { return (*head)(emb->forward(idx)); }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}
}  // namespace

TEST_CASE("a tied weight is one parameter under its first name, as PyTorch's named_parameters") {
  Tied m;
  // PyTorch: ['emb.weight', 'body.weight', 'body.bias'].
  CHECK(names_of(m.named_parameters()) == std::vector<std::string>{"emb.weight", "body.weight", "body.bias"});
  CHECK(m.parameters().size() == 3);
  CHECK(m.num_parameters() == 5 * 3 + 3 * 3 + 3);
  // Saved once: safetensors holds no aliases (PyTorch's own state_dict keeps both names; its
  // safetensors save_model drops the later one, as here).
  const StateDict sd = m.state_dict();
  CHECK(sd.size() == 3);
  CHECK(sd.count("emb.weight") == 1);
  CHECK(sd.count("head.weight") == 0);
}

TEST_CASE("a tied model trains with AdamW, gradients summed over both uses, as PyTorch") {
  Tied m;
  std::vector<float> w0;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) w0.push_back(static_cast<float>(std::sin(i * 3 + j) * 0.5));
  {
    NoGradGuard no_grad;
    m.emb->weight.copy_(tensor(w0, {5, 3}));
  }
  optim::AdamW opt(m.parameters(), {.lr = 0.1});  // each tensor listed once, so accepted
  const Tensor idx = tensor(std::vector<int64_t>{0, 2, 4, 2}, {4});
  const Tensor target = tensor(std::vector<int64_t>{1, 2, 3, 0}, {4});
  const Tensor loss = cross_entropy(m(idx), target);
  loss.backward();
  // PyTorch 1.13, the same weights: loss, the summed gradient, the weight after one AdamW step.
  CHECK(loss.item<double>() == doctest::Approx(1.7363214492797852).epsilon(1e-6));
  check_close(m.emb->weight.grad(),
              tensor(std::vector<float>{-0.0330871157, 0.1346932501, 0.1786372364, -0.0169666652, -0.0659040064,
                                        -0.0542495064, 0.0006896871, -0.1059631407, -0.1151939481, 0.0502582788,
                                        -0.0128242923, -0.0641162694, -0.1033022106, 0.1869574487, 0.3053292632},
                     {5, 3}),
              {1e-6, 1e-5});
  opt.step();
  check_close(m.head->weight,
              tensor(std::vector<float>{0.0999999642, 0.3203147650, 0.3541940749, 0.1704893857, -0.2780228853,
                                        -0.3789827228, -0.2395665646, 0.4281648099, 0.5941844583, 0.1058532149,
                                        -0.1717386544, -0.3994951248, -0.1680181921, 0.1098734513, 0.3948084116},
                     {5, 3}),
              {1e-6, 1e-5});
  CHECK(m.head->weight.is_same(m.emb->weight));
}

TEST_CASE("a tied model loads a file with one name or both, strictly") {
  Tied saved;
  const StateDict one = saved.state_dict();  // emb.weight only (also what a PyTorch-saved tied safetensors holds)
  const StateDict both = [&] {
    StateDict out = one;
    out["head.weight"] = one.at("emb.weight");
    return out;
  }();

  for (const StateDict* sd : {&one, &both}) {
    Tied m;
    m.load_state_dict(*sd);  // strict
    check_close(m.emb->weight, saved.emb->weight, {0, 0});
    CHECK(m.head->weight.is_same(m.emb->weight));
  }
  // Through a file, as hg::save writes it.
  const auto path = std::filesystem::temp_directory_path() / "halfgrad_test_tied.safetensors";
  save(saved, path.string());
  Tied m;
  m.load_state_dict(load(path.string()));
  std::filesystem::remove(path);
  check_close(m.head->weight, saved.emb->weight, {0, 0});

  // Neither name: both are reported missing; a wrong shape under either name is still an error.
  StateDict none = one;
  none.erase("emb.weight");
  check_error([&] { Tied().load_state_dict(none); }, {"[load_state_dict]", "missing keys: emb.weight, head.weight"});
  StateDict bad = one;
  bad["head.weight"] = zeros({2, 3});
  check_error([&] { Tied().load_state_dict(bad); }, {"[load_state_dict]", "'head.weight' has shape"});
}

TEST_CASE("to() keeps a tied weight one tensor") {
  Tied m;
  m.to(kFloat64);
  CHECK(m.emb->weight.dtype() == kFloat64);
  CHECK(m.head->weight.is_same(m.emb->weight));
  CHECK(m.head->weight.requires_grad());
  CHECK(m.parameters().size() == 3);
}
