// Modules: a custom module with registered submodules and parameters, Sequential, state_dict,
// options, a tied weight, freezing, a forward with a mask.
#include <halfgrad.h>

namespace nn = hg::nn;

// As a torch.nn.Module: register what the module owns, and the base class finds it for
// parameters(), to(), train()/eval() and state_dict().
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
  std::shared_ptr<nn::Sequential> body =
      register_module("body", nn::sequential(std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Linear>(8, 2, nn::LinearOptions{.bias = false})));
  hg::Tensor scale;  // a plain parameter
  Net() : nn::Module("Net") { register_parameter("scale", scale, hg::ones({2})); }

  hg::Tensor forward(const hg::Tensor& x) override { return (*body)((*fc1)(x)) * scale; }
};

// A forward with more than one argument: CallableModule makes block(x, mask) run the hooks too.
struct Masked : nn::CallableModule<Masked> {
  Masked() : CallableModule("Masked") {}
  hg::Tensor forward(const hg::Tensor& x, const hg::Tensor& mask) { return hg::masked_fill(x, mask, 0.0); }
};

// A language model whose output layer is its embedding matrix (weight tying).
struct TinyLM : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(16, 8));
  std::shared_ptr<nn::LayerNorm> norm = register_module("norm", std::make_shared<nn::LayerNorm>(8));
  std::shared_ptr<nn::Linear> head =
      register_module("head", std::make_shared<nn::Linear>(8, 16, nn::LinearOptions{.bias = false}));
  TinyLM() : nn::Module("TinyLM") { head->weight = emb->weight; }
  hg::Tensor forward(const hg::Tensor& ids) override { return (*head)((*norm)((*emb)(ids))); }
};

int main() {
  hg::manual_seed(0);
  Net net;
  hg::Tensor out = net(hg::randn({5, 4}));
  HG_CHECK(out.shape() == hg::Shape({5, 2}), "guide", "forward");
  HG_CHECK(net.num_parameters() == 4 * 8 + 8 + 8 * 2 + 2, "guide", "parameter count");
  for (const auto& [name, p] : net.named_parameters()) fmt::print("{} {}\n", name, p.shape());
  for (const auto& [name, m] : net.named_modules()) fmt::print("'{}' {}\n", name, m->type_name());
  net.fc1->requires_grad_(false);  // freeze a submodule
  HG_CHECK(!net.fc1->weight.requires_grad() && net.scale.requires_grad(), "guide", "frozen");
  HG_CHECK(net.body->get<nn::Linear>(1)->weight.shape() == hg::Shape({2, 8}), "guide", "typed access");

  // Sequential names its layers "0", "1", ... as PyTorch does.
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Dropout>(0.1), std::make_shared<nn::Linear>(8, 2)};
  seq.eval();  // dropout off
  hg::StateDict sd = seq.state_dict();
  HG_CHECK(sd.count("3.weight") == 1, "guide", "state_dict keys");
  seq.load_state_dict(sd);

  Masked masked;
  HG_CHECK(masked(hg::ones({2}), hg::ones({2}).to(hg::kBool)).sum().item<float>() == 0, "guide", "masked");

  // The tied weight is one parameter, saved once; an optimizer takes it once.
  TinyLM lm;
  HG_CHECK(lm.parameters().size() == 3 && lm.state_dict().count("head.weight") == 0, "guide", "tied");
  hg::optim::AdamW opt(lm.parameters(), {.lr = 1e-3});
  hg::cross_entropy(lm(hg::tensor(std::vector<int64_t>{1, 2, 3})), hg::tensor(std::vector<int64_t>{2, 3, 4}))
      .backward();
  opt.step();
  HG_CHECK(lm.head->weight.is_same(lm.emb->weight), "guide", "still tied");
}
