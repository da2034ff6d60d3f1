// Walking and changing a module tree as PyTorch's nn.Module does: named_modules/modules, apply,
// requires_grad_, train/eval, and registration from outside the module.
#include "nn_helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
struct Tree : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(10, 4));
  std::shared_ptr<nn::Sequential> body =
      register_module("body", nn::sequential(std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::ReLU>()));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(4, 10));
  Tree() : Module("Tree") {}
};
}  // namespace

TEST_CASE("named_modules and modules: this module first, depth first, each module once") {
  Tree m;
  std::vector<std::string> names;
  for (const auto& [name, mod] : m.named_modules()) names.push_back(name);
  // PyTorch: ['', 'emb', 'body', 'body.0', 'body.1', 'head'].
  CHECK(names == std::vector<std::string>{"", "emb", "body", "body.0", "body.1", "head"});
  const std::vector<nn::Module*> mods = m.modules();
  REQUIRE(mods.size() == 6);
  CHECK(mods[0] == &m);
  CHECK(mods[3] == m.body->get<nn::Linear>(0).get());

  // A module registered twice is listed once, under its first name (PyTorch: ['', '0', '0.0']).
  auto shared = nn::sequential(std::make_shared<nn::Linear>(2, 2));
  nn::Sequential twice(shared, shared);
  names.clear();
  for (const auto& [name, mod] : twice.named_modules()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"", "0", "0.0"});
  CHECK(twice.parameters().size() == 2);
}

TEST_CASE("apply runs on every child's tree, then on the module, as PyTorch's") {
  Tree m;
  std::vector<std::string> order;
  nn::Module& same = m.apply([&](nn::Module& mod) { order.push_back(mod.type_name()); });
  CHECK(&same == &m);
  // PyTorch: ['Embedding', 'Linear', 'ReLU', 'Sequential', 'Linear', 'M'].
  CHECK(order == std::vector<std::string>{"Embedding", "Linear", "ReLU", "Sequential", "Linear", "Tree"});
  // The common use: initialise every Linear's weights.
  m.apply([](nn::Module& mod) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&mod)) nn::init::zeros_(lin->weight);
  });
  check_close(m.head->weight, zeros({10, 4}), {0, 0});
  check_error([&] { m.apply(nullptr); }, {"[apply]", "empty"});
}

TEST_CASE("requires_grad_, train and eval reach the whole tree") {
  Tree m;
  m.body->requires_grad_(false);  // freeze a submodule
  for (const auto& [name, p] : m.named_parameters()) CHECK(p.requires_grad() == (name.rfind("body.", 0) != 0));
  (*m.head)((*m.body)(m.emb->forward(tensor(std::vector<int64_t>{1, 2}, {2})))).sum().backward();
  CHECK_FALSE(m.body->get<nn::Linear>(0)->weight.grad().defined());
  CHECK(m.head->weight.grad().defined());
  CHECK(&m.requires_grad_() == &m);
  for (const Tensor& p : m.parameters()) CHECK(p.requires_grad());

  m.eval();
  for (nn::Module* mod : m.modules()) CHECK_FALSE(mod->is_training());
  m.body->train();
  CHECK_FALSE(m.is_training());
  CHECK(m.body->get<nn::ReLU>(1)->is_training());
  m.train();
  for (nn::Module* mod : m.modules()) CHECK(mod->is_training());
}

TEST_CASE("register_parameter, register_buffer and register_module work from outside a module") {
  Tree m;
  Tensor& scale = m.register_parameter("scale", ones({4}));
  m.register_buffer("step", zeros({}, kInt64));
  m.register_module("extra", std::make_shared<nn::Linear>(4, 2));
  CHECK(scale.requires_grad());
  const StateDict sd = m.state_dict();
  CHECK(sd.count("scale") == 1);
  CHECK(sd.count("step") == 1);
  CHECK(sd.count("extra.weight") == 1);
  scale = full({4}, 2.0).requires_grad_();  // the module reads its slot: the new value is registered
  check_close(m.state_dict().at("scale"), full({4}, 2.0), {0, 0});
  m.to(kFloat64);
  CHECK(scale.dtype() == kFloat64);

  check_error([&] { m.register_parameter("scale", ones({1})); }, {"[Tree]", "'scale' is already registered"});
  check_error([&] { m.register_buffer("a.b", ones({1})); }, {"[Tree]", "invalid name 'a.b'"});
  check_error([&] { m.register_parameter("idx", zeros({2}, kInt64)); }, {"[Tree]", "floating-point"});
  check_error([&] { m.register_module("none", std::shared_ptr<nn::Linear>()); }, {"[Tree]", "is null"});
}
