// nn::Module plumbing (registration, names, modes, conversions, strict state_dict) and the
// Linear, ReLU, GELU, Flatten and Sequential modules.
#include <cmath>

#include "nn_helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
struct Net : nn::Module {
  Net() : Module("Net") { register_buffer("steps", steps, zeros({1}, kInt64)); }
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 3));
  std::shared_ptr<nn::Sequential> body = register_module(
      "body", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                  std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(3, 2, nn::LinearOptions{.bias = false})}));
  Tensor steps;
  Tensor forward(const Tensor& x) override { return body->forward(fc1->forward(x)); }
};
}  // namespace

TEST_CASE("Module registers parameters, buffers and submodules by dotted name") {
  Net net;
  std::vector<std::string> names;
  for (auto& [n, t] : net.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc1.bias", "body.1.weight"});
  CHECK(net.parameters().size() == 3);
  CHECK(net.num_parameters() == 4 * 3 + 3 + 3 * 2);
  CHECK(net.named_buffers().at(0).first == "steps");
  CHECK(net.parameters(false).empty());
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());
  auto sd = net.state_dict();
  CHECK(sd.size() == 4);
  CHECK(sd.count("steps") == 1);
  // Parameters alias the module's tensors.
  CHECK(sd.at("fc1.weight").raw_data() == net.fc1->weight.raw_data());
}

TEST_CASE("train/eval, to(dtype), zero_grad") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net.body->is_training());
  CHECK_FALSE((*net.body)[0]->is_training());
  net.train();
  CHECK(net.fc1->is_training());

  Tensor x = randn({5, 4});
  net(x).sum().backward();
  CHECK(net.fc1->weight.grad().defined());
  net.zero_grad();
  CHECK_FALSE(net.fc1->weight.grad().defined());

  const auto w = net.fc1->weight.to_vector<double>();
  net.to(kBFloat16);
  CHECK(net.fc1->weight.dtype() == kBFloat16);
  CHECK(net.fc1->weight.requires_grad());
  CHECK(net.parameters()[0].dtype() == kBFloat16);  // the registry sees the new tensor
  CHECK(net.steps.dtype() == kInt64);               // only floating tensors convert
  CHECK(net(x.to(kBFloat16)).dtype() == kBFloat16);
  net.to(kFloat32);
  check_close(net.fc1->weight, tensor(w, {3, 4}).to(kFloat32), {1e-2, 1e-2});
  net.to(kCPU);
  CHECK(net.fc1->weight.device() == Device(kCPU));
  check_error([&] { net.to(kInt64); }, {"[to]", "floating"});
}

TEST_CASE("load_state_dict is strict about keys and shapes") {
  Net a, b;
  b.load_state_dict(a.state_dict());
  CHECK(b.fc1->weight.to_vector<float>() == a.fc1->weight.to_vector<float>());
  auto sd = a.state_dict();
  sd.erase("fc1.bias");
  sd["extra"] = ones({1});
  check_error([&] { b.load_state_dict(sd); },
              {"[load_state_dict]", "missing keys: fc1.bias", "unexpected keys: extra"});
  b.load_state_dict(sd, /*strict=*/false);
  sd = a.state_dict();
  sd["fc1.weight"] = ones({3, 5});
  check_error([&] { b.load_state_dict(sd, false); }, {"'fc1.weight' has shape [3, 5] in the state dict, [3, 4]"});
  // Values convert to the module's dtype.
  sd = a.state_dict();
  for (auto& [k, t] : sd) t = t.to(t.is_floating_point() ? kFloat64 : t.dtype());
  b.load_state_dict(sd);
  CHECK(b.fc1->weight.dtype() == kFloat32);
  hg::test::check_state_dict_round_trip(a, b);
}

TEST_CASE("Linear: PyTorch's init bounds, forward against float64, gradients") {
  manual_seed(1);
  nn::Linear lin(50, 20);
  const double bound = 1.0 / std::sqrt(50.0);
  for (double w : lin.weight.to_vector<double>()) CHECK(std::abs(w) <= bound);
  for (double b : lin.bias.to_vector<double>()) CHECK(std::abs(b) <= bound);
  double mx = 0;
  for (double w : lin.weight.to_vector<double>()) mx = std::max(mx, std::abs(w));
  CHECK(mx > 0.9 * bound);  // uses the whole range

  Tensor x = randn({3, 50});
  const auto xv = x.to_vector<double>(), wv = lin.weight.to_vector<double>(), bv = lin.bias.to_vector<double>();
  std::vector<double> ref(3 * 20);
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 20; ++o) {
      double s = bv[o];
      for (int k = 0; k < 50; ++k) s += xv[i * 50 + k] * wv[o * 50 + k];
      ref[i * 20 + o] = s;
    }
  check_close(lin(x), tensor(ref, {3, 20}));
  check_close(lin(hg::test::non_contiguous(x)), tensor(ref, {3, 20}));
  check_error([&] { lin(randn({3, 7})); }, {"[Linear]", "[..., 50]", "[3, 7]"});

  nn::Linear small(3, 2);
  hg::test::check_module_gradients(small, randn({4, 3}));
  nn::Linear nobias(3, 2, {.bias = false});
  CHECK(nobias.parameters().size() == 1);
  hg::test::check_module_gradients(nobias, randn({2, 3}));
  nn::Linear other(3, 2);
  small.to(kFloat32);
  hg::test::check_state_dict_round_trip(small, other);
}

TEST_CASE("ReLU, GELU, Flatten, Sequential forward and gradients") {
  Tensor x = tensor(std::vector<double>{-1.5, -0.2, 0.3, 2.0}, {2, 2});
  check_close(nn::ReLU()(x), tensor(std::vector<double>{0, 0, 0.3, 2.0}, {2, 2}));
  std::vector<double> g;
  for (double v : x.to_vector<double>()) g.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  check_close(nn::GELU()(x), tensor(g, {2, 2}));
  std::vector<double> gt;
  for (double v : x.to_vector<double>())
    gt.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
  check_close(nn::GELU({.approximate = "tanh"})(x), tensor(gt, {2, 2}));
  CHECK(nn::Flatten()(zeros({2, 3, 4, 5})).shape() == Shape{2, 60});
  CHECK(nn::Flatten(0, 1)(zeros({2, 3, 4})).shape() == Shape{6, 4});

  nn::GELU gelu;
  hg::test::check_module_gradients(gelu, tensor(std::vector<double>{-1.5, -0.2, 0.3, 2.0}));
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::GELU>(), std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(5, 2)};
  CHECK(seq.size() == 4);
  CHECK(seq.named_parameters().at(2).first == "3.weight");
  hg::test::check_module_gradients(seq, randn({3, 4}));
  check_error([] { nn::Module().forward(ones({1})); }, {"[Module]", "no one-tensor forward"});
}
