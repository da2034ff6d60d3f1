// leaky_relu, elu, selu, mish, hardswish and softplus (functions and modules): values and
// gradients against PyTorch, float64 references per dtype, gradcheck, gradgradcheck, bad input.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

namespace {
const std::vector<double> kX = {-5.0, -3.0, -1.5, -0.3, 0.0, 0.4, 2.0, 3.0, 4.5, 25.0};

struct Expected {
  const char* name;
  std::function<Tensor(const Tensor&)> f;
  std::vector<double> y, grad;
};

// Values printed by PyTorch 1.13 in float64 on kX: y = F.<op>(x, ...), grad = autograd.grad(y.sum(), x).
std::vector<Expected> torch_values() {
  return {
      {"leaky_relu(x, 0.2)",
       [](const Tensor& t) { return leaky_relu(t, 0.2); },
       {-1.0, -0.6000000000000001, -0.30000000000000004, -0.06, 0.0, 0.4, 2.0, 3.0, 4.5, 25.0},
       {0.2, 0.2, 0.2, 0.2, 0.2, 1.0, 1.0, 1.0, 1.0, 1.0}},
      {"elu(x, 0.7)",
       [](const Tensor& t) { return elu(t, 0.7); },
       {-0.6952834371006401, -0.6651490521424952, -0.5438088878960992, -0.1814272455227975, 0.0, 0.4, 2.0, 3.0, 4.5,
        25.0},
       {0.004716562899359827, 0.03485094785750476, 0.15619111210390085, 0.5185727544772025, 0.7, 1.0, 1.0, 1.0, 1.0,
        1.0}},
      {"selu(x)",
       [](const Tensor& t) { return selu(t); },
       {-1.7462533606696198, -1.6705687287671118, -1.3658143533672527, -0.45566731537912203, 0.0, 0.4202803949421922,
        2.101401974710961, 3.1521029620664414, 4.728154443099662, 26.26752468388701},
       {0.011845980177756718, 0.08753061208026487, 0.392284987480124, 1.3024320254682547, 1.7580993408473766,
        1.0507009873554805, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805, 1.0507009873554805}},
      {"mish(x)",
       [](const Tensor& t) { return mish(t); },
       {-0.033576237730161704, -0.1456474612756246, -0.2980997421668068, -0.15113317713833455, 0.0, 0.2890305340723632,
        1.9439589595339946, 2.9865350049679575, 4.498913714953316, 25.0},
       {-0.026747498019901936, -0.09339311453232084, -0.06409781589225866, 0.40851087693570215, 0.6, 0.8370175025417963,
        1.0693179342794896, 1.0211069109294435, 1.0019070441688076, 1.0}},
      {"hardswish(x)",
       [](const Tensor& t) { return hardswish(t); },
       {-0.0, -0.0, -0.375, -0.135, 0.0, 0.22666666666666668, 1.6666666666666667, 3.0, 4.5, 25.0},
       {0.0, -0.5, 0.0, 0.4, 0.5, 0.6333333333333333, 1.1666666666666665, 1.0, 1.0, 1.0}},
      {"softplus(x, 2, 5)",
       [](const Tensor& t) { return softplus(t, 2.0, 5.0); },
       {2.2699449608432323e-05, 0.0012378425688652247, 0.02429367578687103, 0.21874397524294284, 0.34657359027997264,
        0.5855503329738889, 2.0090749639589047, 3.0, 4.5, 25.0},
       {4.5397868702434395e-05, 0.0024726231566347748, 0.04742587317756679, 0.35434369377420455, 0.5,
        0.6899744811276125, 0.9820137900379085, 1.0, 1.0, 1.0}},
  };
}

double selu_ref(double x) {
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return x > 0 ? scale * x : scale * alpha * std::expm1(x);
}
}  // namespace

TEST_CASE("activations: values and gradients match PyTorch in float64 and float32") {
  for (const Expected& e : torch_values()) {
    CAPTURE(e.name);
    for (Dtype d : {kFloat64, kFloat32}) {
      CAPTURE(dtype_name(d));
      Tensor x = tensor(kX, {10}).to(d).requires_grad_(true);
      Tensor y = e.f(x);
      y.sum().backward();
      check_close(y, tensor(e.y, {10}));
      check_close(x.grad(), tensor(e.grad, {10}));
    }
  }
}

TEST_CASE("activations match float64 references in every float dtype, non-contiguous too") {
  manual_seed(21);
  const Tensor x64 = randn({7, 5}, kFloat64) * 3.0;
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = x64.to(d);
    const auto ref = [&](auto f) {
      auto v = x.to(kFloat64).to_vector<double>();
      for (double& a : v) a = f(a);
      return tensor(v, x.shape());
    };
    check_close(leaky_relu(non_contiguous(x), 0.1), ref([](double v) { return v > 0 ? v : 0.1 * v; }));
    check_close(elu(x, 1.3), ref([](double v) { return v > 0 ? v : 1.3 * std::expm1(v); }));
    check_close(selu(non_contiguous(x)), ref(selu_ref));
    check_close(mish(x), ref([](double v) { return v * std::tanh(std::log1p(std::exp(v))); }));
    check_close(hardswish(x), ref([](double v) { return v * std::min(std::max(v + 3, 0.0), 6.0) / 6; }));
    CHECK(leaky_relu(x).dtype() == d);
  }
}

TEST_CASE("activations: special values, empty tensors, integer inputs") {
  const Tensor s = tensor(std::vector<float>{NAN, INFINITY, -INFINITY, -1000, 1000});
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{[](const Tensor& t) { return leaky_relu(t); },
                                                                  [](const Tensor& t) { return elu(t); }, selu, mish,
                                                                  hardswish}) {
    const auto v = f(s).to_vector<float>();
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == INFINITY);
    CHECK(std::isfinite(v[3]));
    CHECK(v[4] > 999);
  }
  CHECK(mish(s).to_vector<float>()[4] == 1000.0f);
  CHECK(elu(s).to_vector<float>()[2] == -1.0f);
  CHECK(hardswish(s).to_vector<float>()[3] == 0.0f);
  CHECK(leaky_relu(zeros({0, 3})).shape() == Shape{0, 3});
  // Integer inputs compute in float32, as the other floating unary ops.
  CHECK(elu(arange(int64_t{3})).dtype() == kFloat32);
}

TEST_CASE("activations: gradcheck and gradgradcheck") {
  manual_seed(22);
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  // Inputs away from the kinks, where finite differences are not defined.
  const Tensor x = tensor(std::vector<double>{-4.1, -2.5, -0.7, -0.2, 0.3, 1.1, 2.4, 3.6}, {2, 4});
  for (auto f : std::vector<std::function<Tensor(const Tensor&)>>{[](const Tensor& t) { return leaky_relu(t, 0.3); },
                                                                  [](const Tensor& t) { return elu(t, 0.8); }, selu,
                                                                  mish, hardswish}) {
    CHECK(gradcheck([&](const TensorList& in) { return f(in[0]); }, {x}));
    CHECK(gradgradcheck([&](const TensorList& in) { return f(in[0]) * in[0]; }, {x}));
  }
}

TEST_CASE("activation modules call their ops with their parameters") {
  manual_seed(23);
  const Tensor x = randn({4, 6});
  CHECK(test::bitwise_equal(nn::LeakyReLU(0.2)(x), leaky_relu(x, 0.2)));
  CHECK(test::bitwise_equal(nn::ELU(0.5)(x), elu(x, 0.5)));
  CHECK(test::bitwise_equal(nn::SELU()(x), selu(x)));
  CHECK(test::bitwise_equal(nn::Mish()(x), mish(x)));
  CHECK(test::bitwise_equal(nn::Hardswish()(x), hardswish(x)));
  CHECK(test::bitwise_equal(nn::Softplus({.beta = 2.0, .threshold = 3.0})(x), softplus(x, 2.0, 3.0)));
  CHECK(fmt::format("{}", nn::LeakyReLU(0.2)).find("LeakyReLU(negative_slope=0.2)") != std::string::npos);
  CHECK(nn::Mish().parameters().empty());
}

TEST_CASE("activations: bad input names the op") {
  check_error([] { leaky_relu((randn({2}) > 0.0)); }, {"[leaky_relu]", "bool"});
  check_error([] { elu(Tensor()); }, {"[elu]", "undefined"});
  check_error([] { selu((randn({2}) > 0.0)); }, {"[selu]", "bool"});
  check_error([] { mish(Tensor()); }, {"[mish]", "undefined"});
  check_error([] { hardswish(Tensor()); }, {"[hardswish]", "undefined"});
  check_error([] { leaky_relu(randn({2}), NAN); }, {"[leaky_relu]", "negative_slope"});
  check_error([] { elu(randn({2}), INFINITY); }, {"[elu]", "alpha"});
}
