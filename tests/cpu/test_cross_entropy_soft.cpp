// cross_entropy with probability (soft) targets and label_smoothing: values and both gradients
// against PyTorch, spatial inputs, gradcheck, gradgradcheck, autocast, bad input.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
Tensor logits() {
  return tensor(std::vector<double>{0.5, -1.0, 2.0, 0.1, 1.5, 0.25, -0.75, 3.0, -2.0, 1.5, 0.0, 0.3}, {3, 4});
}
Tensor probs() {
  return tensor(std::vector<double>{0.1, 0.2, 0.6, 0.1, 0.0, 0.0, 0.0, 1.0, 0.25, 0.25, 0.3, 0.2}, {3, 4});
}
}  // namespace

TEST_CASE("cross_entropy with probability targets matches PyTorch, with and without label_smoothing") {
  struct Case {
    Reduction reduction;
    double smoothing;
    std::vector<double> y, gx, gt;
  };
  // F.cross_entropy(x, t, reduction=..., label_smoothing=...) in float64 on logits()/probs(); gx, gt =
  // autograd.grad((y * w).sum(), (x, t)) with w = arange(1, y.numel() + 1).reshape(y.shape).
  const std::vector<Case> cases = {
      {Reduction::Mean,
       0.0,
       {1.1896801470984497},
       {0.01895310604861199, -0.05499998507378204, 0.03433156390495813, 0.0017153151202119283, 0.05675117906975141,
        0.0162594850309554, 0.005981530266923303, -0.07899219436763008, -0.07685816215055437, 0.13109488689429227,
        -0.052154596880267114, -0.002082127863470857},
       {0.6174686460344769, 1.1174686460344767, 0.1174686460344769, 0.7508019793678101, 0.5901555192029495,
        1.0068221858696162, 1.3401555192029495, 0.09015551920294959, 1.3137226485276898, 0.14705598186102328,
        0.6470559818610233, 0.5470559818610232}},
      {Reduction::Mean,
       0.2,
       {1.3660134804317832},
       {0.008953106048611997, -0.05833331840711537, 0.05766489723829149, -0.008284684879788068, 0.04008451240308474,
        -0.0004071816357112676, -0.010685136399743363, -0.028992194367630095, -0.07685816215055437, 0.13109488689429227,
        -0.04882126354693377, -0.005415461196804198},
       {0.49397491682758154, 0.8939749168275815, 0.09397491682758152, 0.6006415834942481, 0.4721244153623596,
        0.8054577486956931, 1.0721244153623597, 0.07212441536235968, 1.0509781188221519, 0.11764478548881863,
        0.5176447854888186, 0.4376447854888186}},
      {Reduction::Sum,
       0.2,
       {4.09804044129535},
       {0.026859318145835975, -0.17499995522134612, 0.17299469171487436, -0.024854054639364215, 0.12025353720925423,
        -0.0012215449071338036, -0.03205540919923009, -0.08697658310289036, -0.23057448645166312, 0.3932846606828768,
        -0.14646379064080134, -0.016246383590412583},
       {1.4819247504827446, 2.681924750482745, 0.2819247504827446, 1.8019247504827445, 1.416373246087079,
        2.4163732460870793, 3.216373246087079, 0.21637324608707906, 3.152934356466456, 0.35293435646645593,
        1.552934356466456, 1.312934356466456}},
      {Reduction::None,
       0.2,
       {1.4244059381034306, 0.6704665576088489, 2.0031679455830695},
       {0.026859318145835975, -0.17499995522134612, 0.17299469171487436, -0.024854054639364215, 0.24050707441850847,
        -0.002443089814267607, -0.06411081839846018, -0.17395316620578072, -0.6917234593549894, 1.1798539820486305,
        -0.43939137192240396, -0.048739150771237805},
       {1.4819247504827446, 2.681924750482745, 0.2819247504827446, 1.8019247504827445, 2.832746492174158,
        4.8327464921741585, 6.432746492174158, 0.4327464921741581, 9.458803069399368, 1.0588030693993677,
        4.658803069399368, 3.938803069399368}},
  };
  for (const Case& c : cases) {
    CAPTURE(static_cast<int>(c.reduction));
    CAPTURE(c.smoothing);
    for (Dtype d : {kFloat64, kFloat32}) {
      Tensor x = logits().to(d).requires_grad_(true), t = probs().to(d).requires_grad_(true);
      Tensor y = cross_entropy(x, t, c.reduction, -100, c.smoothing);
      CHECK(y.dtype() == d);
      const Shape shape = c.y.size() == 1 ? Shape{} : Shape{3};
      REQUIRE(y.shape() == shape);
      Tensor w = arange(1.0, static_cast<double>(y.numel()) + 1, 1.0, TensorOptions(d)).reshape(shape);
      (y * w).sum().backward();
      check_close(y, tensor(c.y, shape));
      check_close(x.grad(), tensor(c.gx, {3, 4}));
      check_close(t.grad(), tensor(c.gt, {3, 4}));
    }
  }
  // [N, C, d] logits with [N, C, d] probabilities: F.cross_entropy(..., reduction='none', label_smoothing=0.1).
  const Tensor xs = tensor(std::vector<double>{0.5, -1.0, 2.0, 0.1, 1.0, 0.0}, {1, 3, 2});
  const Tensor ts = tensor(std::vector<double>{0.2, 0.5, 0.3, 0.5, 0.5, 0.0}, {1, 3, 2});
  check_close(cross_entropy(xs, ts, Reduction::None, -100, 0.1),
              tensor(std::vector<double>{1.2677021174412784, 1.3404523519579399}, {1, 2}));
  // Class indices with label_smoothing keep working: F.cross_entropy(x, [2, 3, 1], label_smoothing=0.2).
  CHECK(cross_entropy(logits(), tensor(std::vector<int64_t>{2, 3, 1}), Reduction::Mean, -100, 0.2).item<double>() ==
        doctest::Approx(0.6980134804317831).epsilon(1e-12));
  // One-hot probabilities give the class-index loss.
  check_close(cross_entropy(logits(), one_hot(tensor(std::vector<int64_t>{2, 3, 1}), 4).to(kFloat64)),
              cross_entropy(logits(), tensor(std::vector<int64_t>{2, 3, 1})));
}

TEST_CASE("cross_entropy with probability targets: gradcheck, gradgradcheck, 1-d input, autocast") {
  manual_seed(71);
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  const Tensor x = randn({3, 4, 2}, kFloat64), t = softmax(randn({3, 4, 2}, kFloat64), 1);
  CHECK(gradcheck([](const TensorList& in) { return cross_entropy(in[0], in[1], Reduction::Sum, -100, 0.3); }, {x, t}));
  CHECK(gradgradcheck([](const TensorList& in) { return cross_entropy(in[0], in[1], Reduction::Mean, -100, 0.1); },
                      {x, t}));
  // [C] logits with [C] probabilities give a 0-d loss.
  CHECK(cross_entropy(randn({5}), softmax(randn({5}), 0)).shape() == Shape{});
  // Under bf16 autocast the loss runs in float32 (the fp32 row) on bf16 inputs.
  amp::AutocastGuard guard(kCPU, kBFloat16);
  CHECK(cross_entropy(randn({2, 3}, kBFloat16), softmax(randn({2, 3}), 1).to(kBFloat16)).dtype() == kFloat32);
}

TEST_CASE("cross_entropy: bad targets name the op; a float target no longer asks for a cast") {
  const Tensor x = randn({3, 4});
  check_error([&] { cross_entropy(x, randn({3, 5})); }, {"[cross_entropy]", "probabilities", "[3, 4]", "[3, 5]"});
  check_error([&] { cross_entropy(x, randn({3})); }, {"[cross_entropy]", "probabilities", "[3]"});
  check_error([&] { cross_entropy(x, randn({3, 4}), Reduction::BatchMean); }, {"[cross_entropy]", "BatchMean"});
  check_error(
      [&] {
        cross_entropy(x, randn({3, 4}), Reduction::Mean, -100, 1.5);
      },
      {"[cross_entropy]", "label_smoothing"});
  check_error([&] { cross_entropy(x, randn({3, 4}, kFloat64).to(kCPU) > 0.0); }, {"[cross_entropy]"});
  try {
    cross_entropy(x, randn({3, 5}));
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("to(hg::kInt64)") == std::string::npos);
  }
}
