// ModuleList, ModuleDict, the activation modules, GroupNorm / group_norm, Conv1d / conv1d (values
// against PyTorch 1.13's, pasted below) and module printing.
#include <cmath>
#include <sstream>

#include "amp/autocast_scope.h"
#include "nn_helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
// PyTorch's torch.arange(n).reshape(shape).sin() * scale / .cos(), in float64.
Tensor trig(const Shape& shape, bool cosine, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (cosine ? std::cos(double(i)) : std::sin(double(i)));
  return tensor(v, shape);
}

struct Tower : nn::Module {
  Tower() : Module("Tower") {
    for (int i = 0; i < 2; ++i) blocks->push_back(std::make_shared<nn::Linear>(3, 3));
    heads->insert("cls", std::make_shared<nn::Linear>(3, 2)).insert("act", std::make_shared<nn::Tanh>());
  }
  std::shared_ptr<nn::ModuleList> blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
  std::shared_ptr<nn::ModuleDict> heads = register_module("heads", std::make_shared<nn::ModuleDict>());
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& b : *blocks) h = (*b)(h);
    return (*(*heads)["act"])((*(*heads)["cls"])(h));
  }
};
}  // namespace

TEST_CASE("ModuleList and ModuleDict register their modules under dotted names") {
  Tower t;
  std::vector<std::string> names;
  for (auto& [n, _] : t.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                          "heads.cls.weight", "heads.cls.bias"});
  CHECK(t.state_dict().count("heads.cls.weight") == 1);
  CHECK(t.blocks->size() == 2);
  CHECK(t.blocks->get<nn::Linear>(1) != nullptr);
  CHECK(t.blocks->get<nn::Tanh>(1) == nullptr);
  CHECK(t.heads->keys() == std::vector<std::string>{"cls", "act"});  // insertion order
  CHECK(t.heads->contains("cls"));
  CHECK_FALSE(t.heads->contains("nope"));
  size_t seen = 0;
  for (const auto& [name, m] : *t.heads) seen += name.size() && m ? 1 : 0;
  CHECK(seen == 2);
  CHECK(t(randn({4, 3})).shape() == Shape{4, 2});

  nn::ModuleList list{std::make_shared<nn::ReLU>()};
  list.append(std::make_shared<nn::Sigmoid>());
  CHECK(list.size() == 2);
  CHECK(list.named_children().at(1).first == "1");
  CHECK(list[1]->type_name() == "Sigmoid");

  check_error([&] { list[2]; }, {"[ModuleList]", "index 2", "2 modules"});
  check_error([&] { (*t.heads)["nope"]; }, {"[ModuleDict]", "'nope'", "cls, act"});
  check_error([&] { t.heads->insert("cls", std::make_shared<nn::ReLU>()); }, {"'cls'", "already registered"});
  check_error([&] { t.heads->insert("a.b", std::make_shared<nn::ReLU>()); }, {"'a.b'", "invalid name"});
  check_error([&] { list.push_back(nullptr); }, {"[ModuleList]", "null"});
}

TEST_CASE("activation modules SiLU, Tanh, Sigmoid, Softmax") {
  const std::vector<double> v = {-2.0, -0.5, 0.0, 0.7, 3.0, 1.5};
  const Tensor x = tensor(v, {2, 3});
  std::vector<double> silu(6), th(6), sg(6);
  for (size_t i = 0; i < 6; ++i) {
    sg[i] = 1.0 / (1.0 + std::exp(-v[i]));
    silu[i] = v[i] * sg[i];
    th[i] = std::tanh(v[i]);
  }
  check_close(nn::SiLU()(x), tensor(silu, {2, 3}));
  check_close(nn::Tanh()(x), tensor(th, {2, 3}));
  check_close(nn::Sigmoid()(x), tensor(sg, {2, 3}));
  const Tensor sm = nn::Softmax(0)(x);
  const double e0 = std::exp(-2.0), e1 = std::exp(0.7);
  CHECK(sm.to_vector<double>()[0] == doctest::Approx(e0 / (e0 + e1)).epsilon(1e-12));
  check_close(sm.sum({0}), ones({3}, kFloat64));
  CHECK(autograd::gradcheck([](const TensorList& in) { return nn::SiLU()(in[0]); }, {randn({2, 3})}));
}

TEST_CASE("group_norm and GroupNorm match PyTorch") {
  // x = torch.arange(24.).reshape(2, 4, 3).sin() * 2; F.group_norm(x, 2, w, b)
  const Tensor x = trig({2, 4, 3}, false, 2.0);
  const Tensor w = tensor(std::vector<double>{1.0, 0.5, -1.0, 2.0}),
               b = tensor(std::vector<double>{0.1, 0.2, 0.3, -0.4});
  const Tensor want =
      tensor(std::vector<double>{0.05876552080707803,  1.2405534253546457,  1.3358109805553338,  0.2784794147301763,
                                 -0.3520556677975886,  -0.4939887102911164, 0.7547300456418526,  -0.5818232244446464,
                                 -1.0562267038400563,  0.6646320428239486,  -2.0648182821480123, -3.3664535259616364,
                                 -0.7431398441001859,  0.6418419647015471,  1.4676143813895839,  0.637483027152778,
                                 -0.04158220829682202, -0.5290590698514284, 1.4664003470576388,  0.15275967001061044,
                                 -0.9599462547678627,  1.897401463085468,   -0.5684352373356572, -3.0105387011490383},
             {2, 4, 3});
  check_close(group_norm(x, 2, w, b), want, {1e-10, 1e-10});
  check_close(group_norm(x.to(kFloat32), 2, w.to(kFloat32), b.to(kFloat32)), want, {1e-5, 1e-5});
  check_close(group_norm(x.to(kBFloat16), 2, w.to(kBFloat16), b.to(kBFloat16)), want, {5e-2, 5e-2});
  // A 4-d input normalises each group over its channels and positions.
  const Tensor x4 = randn({2, 4, 2, 2}, kFloat64);
  const Tensor y4 = group_norm(x4, 4).reshape({2, 4, 4});
  check_close(y4.mean({2}), zeros({2, 4}, kFloat64), {1e-10, 1e-10});

  nn::GroupNorm gn(2, 4);
  CHECK(gn.weight.shape() == Shape{4});
  check_close(gn(x), group_norm(x, 2, ones({4}, kFloat64), zeros({4}, kFloat64)), {1e-6, 1e-6});
  CHECK(nn::GroupNorm(2, 4, {.affine = false}).parameters().empty());

  CHECK(autograd::gradcheck([](const TensorList& in) { return group_norm(in[0], 2, in[1], in[2]); },
                            {randn({2, 4, 3}), randn({4}), randn({4})}));
  {
    amp::AutocastGuard ac(kCPU, kBFloat16);  // PyTorch runs group_norm in float32 under autocast
    CHECK(group_norm(x.to(kBFloat16), 2, w.to(kBFloat16), b.to(kBFloat16)).dtype() == kFloat32);
  }
  check_error([] { group_norm(zeros({2, 6, 3}), 4); }, {"[group_norm]", "6", "divisible", "4"});
  check_error([] { group_norm(zeros({6}), 2); }, {"[group_norm]", "2 dims", "[6]"});
  check_error([] { group_norm(zeros({2, 4}), 2, ones({3})); }, {"[group_norm]", "weight", "[4]", "[3]"});
  check_error([] { group_norm(zeros({2, 4}), 2, ones({4}), ones({2, 2})); }, {"[group_norm]", "bias"});
  check_error([] { group_norm(zeros({2, 4}, kInt64), 2); }, {"[group_norm]", "int64"});
  check_error([] { nn::GroupNorm(3, 4); }, {"[GroupNorm]", "4", "3"});
}

TEST_CASE("conv1d and Conv1d match PyTorch") {
  // xc = arange(56).reshape(2, 4, 7).cos(); wc = arange(36).reshape(6, 2, 3).sin();
  // F.conv1d(xc, wc, bc, stride=2, padding=1, dilation=2, groups=2)
  const Tensor x = trig({2, 4, 7}, true), w = trig({6, 2, 3}, false);
  const Tensor b = tensor(std::vector<double>{0.1, -0.2, 0.3, 0.0, 0.5, -0.6});
  const Tensor want =
      tensor(std::vector<double>{0.5691719297411977,   -0.6698302500334015, -0.41834706403579647, 0.09373253530428616,
                                 -1.1680734412911196,  -0.5418897545670797, 0.3948945755021125,   -0.7892004572127997,
                                 0.16180229674480415,  -0.7151669357211479, 0.044094672604488974, 0.7039941222398218,
                                 -0.16167684209051092, 0.707576848748847,   1.1992539593489377,   -1.1554779505587618,
                                 -0.245476427874169,   0.03881162693912399, -0.5166958957893516,  0.7563393836664494,
                                 0.7283483920591522,   -0.6719052188441109, 0.6914719816212573,   0.29211605204382207,
                                 0.010477157290644301, 1.3555904326016557,  0.6166820294531739,   0.6921739591014909,
                                 0.266468682711248,    -0.6722652631706425, 1.1966995924262314,   0.6001335644028661,
                                 -0.2249281834615282,  0.04572653563668494, -0.6741781362392022,  -1.3198437402597265},
             {2, 6, 3});
  check_close(conv1d(x, w, b, 2, 1, 2, 2), want, {1e-10, 1e-10});
  check_close(conv1d(x.to(kFloat32), w.to(kFloat32), b.to(kFloat32), 2, 1, 2, 2), want, {1e-5, 1e-5});
  check_close(conv1d(x.select(0, 1), w, b, 2, 1, 2, 2), want.select(0, 1), {1e-10, 1e-10});  // unbatched
  CHECK(autograd::gradcheck([](const TensorList& in) { return conv1d(in[0], in[1], in[2], 2, 1, 1, 1); },
                            {randn({2, 3, 6}), randn({4, 3, 2}), randn({4})}));

  nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .dilation = 2, .groups = 2});
  CHECK(conv.weight.shape() == Shape{6, 2, 3});
  CHECK(conv(x.to(kFloat32)).shape() == Shape{2, 6, 3});

  check_error([] { conv1d(zeros({2, 3, 5, 5}), zeros({4, 3, 2})); }, {"[conv1d]", "[2, 3, 5, 5]"});
  check_error([] { conv1d(zeros({2, 3, 5}), zeros({4, 3, 2, 2})); }, {"[conv1d]", "weight", "[4, 3, 2, 2]"});
  check_error([] { conv1d(zeros({2, 3, 5}), zeros({4, 2, 2})); }, {"[conv1d]", "3 channels", "expects 2"});
  check_error([] { conv1d(zeros({2, 3, 2}), zeros({4, 3, 5})); }, {"[conv1d]", "kernel span 5"});
  check_error([] { conv1d(zeros({2, 3, 5}), zeros({4, 3, 2}), Tensor(), 0); }, {"[conv1d]", "stride"});
  check_error([] { nn::Conv1d(3, 4, 2, {.groups = 2}); }, {"[Conv1d]", "groups 2"});
}

TEST_CASE("modules print as PyTorch's repr, with parameter counts") {
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 2), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(2, 1, nn::LinearOptions{.bias = false})};
  const std::string want =
      "Sequential(  # 12 parameters\n"
      "  (0): Linear(in_features=4, out_features=2, bias=true)  # 10 parameters\n"
      "  (1): ReLU()\n"
      "  (2): Linear(in_features=2, out_features=1, bias=false)  # 2 parameters\n"
      ")";
  CHECK(fmt::format("{}", seq) == want);
  CHECK(seq.to_string() == want);
  std::ostringstream os;
  os << seq;
  CHECK(os.str() == want);

  Tower t;
  const std::string tree = fmt::format("{}", t);
  CHECK(tree ==
        "Tower(  # 32 parameters\n"
        "  (blocks): ModuleList(  # 24 parameters\n"
        "    (0): Linear(in_features=3, out_features=3, bias=true)  # 12 parameters\n"
        "    (1): Linear(in_features=3, out_features=3, bias=true)  # 12 parameters\n"
        "  )\n"
        "  (heads): ModuleDict(  # 8 parameters\n"
        "    (cls): Linear(in_features=3, out_features=2, bias=true)  # 8 parameters\n"
        "    (act): Tanh()\n"
        "  )\n"
        ")");
  CHECK(fmt::format("{}", nn::GroupNorm(2, 4)) == "GroupNorm(2, 4, eps=1e-05, affine=true)  # 8 parameters");
  CHECK(fmt::format("{}", nn::Softmax(1)) == "Softmax(dim=1)");
  CHECK(fmt::format("{}", nn::Conv1d(4, 6, 3, {.padding = 1})) ==
        "Conv1d(4, 6, kernel_size=3, stride=1, padding=1, dilation=1, groups=1, bias=true)  # 78 parameters");
}
