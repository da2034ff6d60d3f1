// Modules: a custom module with registered submodules and parameters, Sequential, state_dict.
#include <halfgrad.h>

namespace nn = hg::nn;

// As a torch.nn.Module: register what the module owns, and the base class finds it for
// parameters(), to(), train()/eval() and state_dict().
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 2));
  hg::Tensor scale;  // a plain parameter
  Net() : nn::Module("Net") { register_parameter("scale", scale, hg::ones({2})); }

  hg::Tensor forward(const hg::Tensor& x) override { return fc2->forward(hg::relu(fc1->forward(x))) * scale; }
};

int main() {
  hg::manual_seed(0);
  Net net;
  hg::Tensor out = net(hg::randn({5, 4}));
  HG_CHECK(out.shape() == hg::Shape({5, 2}), "guide", "forward");
  HG_CHECK(net.num_parameters() == 4 * 8 + 8 + 8 * 2 + 2 + 2, "guide", "parameter count");
  for (const auto& [name, p] : net.named_parameters()) fmt::print("{} {}\n", name, p.shape());

  // Sequential names its layers "0", "1", ... as PyTorch does.
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Dropout>(0.1), std::make_shared<nn::Linear>(8, 2)};
  seq.eval();  // dropout off
  hg::StateDict sd = seq.state_dict();
  HG_CHECK(sd.count("3.weight") == 1, "guide", "state_dict keys");
  seq.load_state_dict(sd);
}
