// adaptive_avg_pool2d and adaptive_max_pool2d: values, indices and gradients against PyTorch 1.13,
// the global (1x1) path, other dtypes and layouts, gradcheck and gradgradcheck, modules, bad input.
#include <cmath>

#include "helpers.h"
#include "reference_wave.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::reference_wave;

TEST_CASE("adaptive pools: values, indices and gradients match PyTorch") {
  struct Case {
    bool max;
    std::vector<int64_t> size;
    std::vector<double> y, indices, grad;
  };
  // tests/tools/ops2_reference.py adaptive: x = reference_wave([1, 1, 5, 7], 0.3, 1.1), y =
  // F.adaptive_{avg,max}_pool2d(x, size), grad = d/dx (y * w).sum() with w = reference_wave(y.shape, 0.2, 0.7, cos);
  // float64.
  const std::vector<Case> cases = {
      {false,
       {2, 3},
       {0.08836256007509857, -0.2641805575610636, 0.22257854648855416, -0.16375472714385456, 0.27691150317213886,
        -0.16217073085146608},
       {},
       {0.10889628642680461,   0.10889628642680461,   0.17796406067910067,   0.06906777425229606,
        0.06582338288548621,   -0.003244391366809844, -0.003244391366809844, 0.10889628642680461,
        0.10889628642680461,   0.17796406067910067,   0.06906777425229606,   0.06582338288548621,
        -0.003244391366809844, -0.003244391366809844, 0.03486561739571305,   0.03486561739571305,
        -0.006065774640929264, -0.04093139203664231,  -0.13840912026016416,  -0.09747772822352184,
        -0.09747772822352184,  -0.07403066903109157,  -0.07403066903109157,  -0.18402983532002992,
        -0.10999916628893837,  -0.20423250314565036,  -0.094233336856712,    -0.094233336856712,
        -0.07403066903109157,  -0.07403066903109157,  -0.18402983532002992,  -0.10999916628893837,
        -0.20423250314565036,  -0.094233336856712,    -0.094233336856712}},
      {false,
       {3, 4},
       {0.6473566364056329, -0.03223235739145297, -0.3704808131785809, 0.453103295916642, -0.19157005480143496,
        -0.22517396705100323, 0.262825151382774, 0.08868387478664941, -0.29570022897495135, 0.44557393304713594,
        -0.11197532336890799, -0.6158962378345764},
       {},
       {0.2450166444603104,    0.34861830583875447,  0.10360166137844408,   0.09873507432822931,
        -0.004866587050214766, -0.17143559237017078, -0.16656900531995603,  0.08001789502690285,
        0.08938621954863492,   0.009368324521732085, -0.029646359192751597, -0.03901468371448368,
        -0.14258739858227631,  -0.10357271486779265, -0.16499874943340756,  -0.25923208629011957,
        -0.094233336856712,    -0.12838143352098091, -0.034148096664268913, 0.02884819378789446,
        0.06299629045216337,   0.05638112980192217,  0.12491239723321407,   0.06853126743129191,
        0.13577505652239874,   0.06724378909110684,  0.1187395481333862,    0.051495759042279356,
        0.22137987923532973,   0.38414448352333364,  0.1627646042880039,    0.26415649004337965,
        0.10139188575537576,   0.08989135434549175,  -0.011500531409884015}},
      {false,
       {1, 1},
       {0.003193728148590393},
       {},
       {0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476,
        0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476,
        0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476,
        0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476,
        0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476,
        0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476,
        0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476, 0.028001902224035476}},
      {false,
       {6, 8},
       {0.29552020666133955,   0.6404849683248999,   0.7919609370462084,   0.07797585040455204,  -0.7212218504294766,
        -0.7322627184889291,   0.05691879248722137,  0.5784397643882001,   0.6424392266423605,   0.6473566364056329,
        0.30078638721205586,   -0.3744855591716321,  -0.6405167815523374,  -0.206586296468636,   0.453103295916642,
        0.7366154682643518,    0.49866071520465766,  0.10721318979429026,  -0.5203751176217961,  -0.5792934598735408,
        -0.005155415509886518, 0.5746165069142972,   0.5264430531967645,   0.2954132816647282,   -0.4894761871673578,
        -0.6144692344453354,   -0.4604102702081808,  0.19678860878346985,  0.6389353695780152,   0.38284860218094097,
        -0.2916180874930572,   -0.6459981164519542,  -0.6488064216075091,  -0.29570022897495135, 0.37914531509434624,
        0.6396579177419006,    0.20114738595942847,  -0.4571785695297197,  -0.6158962378345764,  -0.4935717336435718,
        -0.3106972850943689,   0.1977360860429827,   0.8287490979835586,   0.5540986669175963,   -0.32607508558174825,
        -0.8499114551443839,   -0.44495799363557187, 0.0008881568057175921},
       {},
       {1.9777782268792392,   0.6924399580497573,   -0.20715047456737676, -1.0093148021800216,  -1.3367826073485802,
        -1.0355406644766783,  -0.13110121540601596, 1.1069536259539405,   0.8627444043667589,   0.5325256044750118,
        -0.04814830814343388, -0.6061773191039551,  -0.8791116651079991,  -1.0188598284610655,  0.3846884768751948,
        0.7938928972476014,   0.8592989651998272,   0.5205633029018653,   -0.06300141477682608, -0.6169355826617156,
        -1.3371289666105155,  -0.5102511129129793,  0.36868808022700683,  0.8003603092212921,   0.8556105788139985,
        0.5084538239063996,   -0.07783670919453323, -1.0552033748805068,  -1.8774177356022395,  -0.48532306742623343,
        0.4313310037108343,   1.1451233640698502,   1.3203463132606772,   0.8745897603447632,   -0.2177392829624259}},
      {true,
       {2, 3},
       {0.9893582466233816, 0.9491245536478946, 0.9491245536478946, 0.9513287387867827, 0.9999937428570207,
        0.9491245536478946},
       {7, 18, 18, 30, 24, 18},
       {0,
        0,
        0,
        0,
        0,
        0,
        0,
        0.9800665778412416,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        -0.2556895857410322,
        0,
        0,
        0,
        0,
        0,
        -0.9899924966004454,
        0,
        0,
        0,
        0,
        0,
        -0.6662760212798241,
        0,
        0,
        0,
        0}},
      {true,
       {4, 5},
       {0.9893582466233816,  0.9854497299884603, 0.5984721441039565, 0.803784426551622,   0.8947911721405034,
        0.9893582466233816,  0.3190983623493504, 0.9491245536478946, 0.9491245536478946,  0.8947911721405034,
        0.00796318378593379, 0.4504405942753893, 0.9999937428570207, 0.9491245536478946,  0.7111612229059799,
        0.7061694571803343,  0.9513287387867827, 0.9999937428570207, 0.45674597214418966, 0.0008881568057175921},
       {7, 1, 2, 12, 13, 7, 8, 18, 18, 13, 14, 23, 24, 18, 19, 29, 30, 24, 25, 34},
       {0,
        0.6216099682706645,
        -0.029199522301288593,
        0,
        0,
        0,
        0,
        0.13196654613083358,
        -0.3073328699784202,
        0,
        0,
        0,
        -0.6662760212798241,
        -0.013404870872421926,
        0.6083513145322546,
        0,
        0,
        0,
        0.2712719342016958,
        -0.8390715290764534,
        0,
        0,
        0,
        -0.04600212563953606,
        0.2144860641893106,
        0.9728325656974357,
        0,
        0,
        0,
        -0.2912892817213455,
        0.39349086634788927,
        0,
        0,
        0,
        0.5949206633098935}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.max);
    CAPTURE(c.size[0]);
    CAPTURE(c.size[1]);
    const Shape out{1, 1, c.size[0], c.size[1]};
    for (Dtype d : {kFloat64, kFloat32, kBFloat16}) {
      Tensor x = reference_wave({1, 1, 5, 7}, 0.3, 1.1).to(d).requires_grad_();
      Tensor y;
      if (c.max) {
        auto [values, indices] = adaptive_max_pool2d(x, c.size);
        CHECK(indices.dtype() == kInt64);
        if (d != kBFloat16) check_close(indices.to(kFloat64), tensor(c.indices, out), {0, 0});
        y = values;
      } else {
        y = adaptive_avg_pool2d(x, c.size);
      }
      REQUIRE(y.shape() == out);
      CHECK(y.dtype() == d);
      (y * reference_wave(out, 0.2, 0.7, true).to(d)).sum().backward();
      const test::Tolerance tol = d == kBFloat16 ? test::Tolerance{2e-2, 2e-2} : test::tolerance(d);
      check_close(y, tensor(c.y, out), tol);
      if (!c.max || d != kBFloat16) check_close(x.grad(), tensor(c.grad, {1, 1, 5, 7}), tol);
    }
  }
}

TEST_CASE("adaptive pools: many planes, unbatched, strided and 16-bit inputs agree with float64") {
  manual_seed(51);
  const Tensor x64 = randn({2, 3, 9, 6}, kFloat64);
  for (const std::vector<int64_t>& size : std::vector<std::vector<int64_t>>{{1, 1}, {4, 4}, {3}, {9, 6}, {11, 2}}) {
    CAPTURE(size[0]);
    const Tensor avg = adaptive_avg_pool2d(x64, size);
    const Tensor mx = adaptive_max_pool2d(x64, size).first;
    // Each plane alone gives the same values: the kernels index planes right.
    check_close(adaptive_avg_pool2d(x64.select(0, 1).slice(0, 2, 3), size), avg.select(0, 1).slice(0, 2, 3));
    check_close(adaptive_avg_pool2d(x64.select(0, 1), size), avg.select(0, 1));  // unbatched
    check_close(adaptive_max_pool2d(non_contiguous(x64), size).first, mx);
    for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
      CAPTURE(dtype_name(d));
      const Tensor xd = x64.to(d);
      check_close(adaptive_avg_pool2d(xd, size), adaptive_avg_pool2d(xd.to(kFloat64), size));
      // The max picks an element: exactly the float64 max of the rounded values.
      CHECK(test::bitwise_equal(adaptive_max_pool2d(xd, size).first,
                                adaptive_max_pool2d(xd.to(kFloat64), size).first.to(d)));
    }
  }
  // The 1x1 output (global pooling) is the mean over H and W.
  check_close(adaptive_avg_pool2d(x64, {1}), mean(x64, {2, 3}, true));
  // NaN wins in its bin, as PyTorch's; an empty batch or an empty output gives an empty result.
  Tensor xn = zeros({1, 1, 4, 4});
  xn.index_put_({0, 0, 1, 1}, NAN);
  auto [v, i] = adaptive_max_pool2d(xn, {2});
  CHECK(std::isnan(v.to_vector<float>()[0]));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{5, 2, 8, 10});
  CHECK(adaptive_avg_pool2d(zeros({0, 2, 4, 4}), {2}).shape() == Shape{0, 2, 2, 2});
  CHECK(adaptive_max_pool2d(zeros({1, 2, 4, 4}), {0, 3}).first.shape() == Shape{1, 2, 0, 3});
}

TEST_CASE("adaptive pools: gradcheck and gradgradcheck, the average's backward op on its own") {
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  manual_seed(52);
  for (const std::vector<int64_t>& size : std::vector<std::vector<int64_t>>{{1, 1}, {2, 3}, {4, 5}}) {
    CAPTURE(size[0]);
    const Tensor x = randn({2, 2, 5, 4}, kFloat64);
    CHECK(gradcheck([&](const TensorList& v) { return adaptive_avg_pool2d(v[0], size); }, {x}));
    CHECK(gradgradcheck([&](const TensorList& v) { return adaptive_avg_pool2d(v[0] * v[0], size); }, {x}));
    CHECK(gradcheck([&](const TensorList& v) { return adaptive_max_pool2d(v[0], size).first; }, {x}));
    CHECK(gradgradcheck([&](const TensorList& v) { return adaptive_max_pool2d(v[0] * v[0], size).first; }, {x}));
  }
  auto input_grad = [](const TensorList& v) {
    GradModeGuard grad_on(true);
    Tensor t = v[0].detach().requires_grad_();
    return autograd::grad({adaptive_avg_pool2d(t, {3, 2})}, {t}, {v[1]}, std::nullopt, true)[0];
  };
  CHECK(gradcheck(input_grad, {randn({3, 5, 7}), randn({3, 3, 2})}));
  CHECK(gradgradcheck(input_grad, {randn({3, 5, 7}), randn({3, 3, 2})}));
  // Without create_graph the max pool's backward runs its kernel op; the same gradient.
  Tensor x = randn({1, 2, 6, 5}).requires_grad_();
  adaptive_max_pool2d(x, {4, 3}).first.sum().backward();
  const Tensor g1 = x.grad();
  x.set_grad(Tensor());
  auto [values, indices] = adaptive_max_pool2d(x, {4, 3});
  const Tensor manual = scatter_add(zeros({1, 2, 30}), 2, indices.reshape({1, 2, 12}), ones({1, 2, 12}));
  check_close(g1, manual.reshape({1, 2, 6, 5}));
}

TEST_CASE("adaptive pools: modules and autocast (PyTorch's tables do not list them: they keep the dtype)") {
  manual_seed(53);
  const Tensor x = randn({2, 3, 7, 7});
  nn::AdaptiveAvgPool2d gap(1);
  CHECK(test::bitwise_equal(gap(x), adaptive_avg_pool2d(x, {1, 1})));
  nn::AdaptiveMaxPool2d amp_pool({3, 2});
  CHECK(test::bitwise_equal(amp_pool(x), adaptive_max_pool2d(x, {3, 2}).first));
  CHECK(test::bitwise_equal(amp_pool.forward_with_indices(x).second, adaptive_max_pool2d(x, {3, 2}).second));
  CHECK(fmt::format("{}", gap).find("AdaptiveAvgPool2d(output_size=[1, 1])") != std::string::npos);
  amp::AutocastGuard autocast(kCPU, kBFloat16);
  CHECK(adaptive_avg_pool2d(x, {2}).dtype() == kFloat32);
  CHECK(adaptive_max_pool2d(x.to(kBFloat16), {2}).first.dtype() == kBFloat16);
}

TEST_CASE("adaptive pools: bad input names the op") {
  const Tensor x = randn({1, 2, 4, 4});
  check_error([&] { adaptive_avg_pool2d(randn({4, 4}), {2}); }, {"[adaptive_avg_pool2d]", "3-d", "[4, 4]"});
  check_error([&] { adaptive_max_pool2d(x, {2, 2, 2}); }, {"[adaptive_max_pool2d]", "1 or 2 values"});
  check_error([&] { adaptive_avg_pool2d(x, {-1, 2}); }, {"[adaptive_avg_pool2d]", "non-negative"});
  check_error([&] { adaptive_max_pool2d(zeros({2, 3, 0, 4}), {2}); }, {"[adaptive_max_pool2d]", "non-empty"});
  check_error(
      [&] {
        adaptive_avg_pool2d(arange(int64_t{16}).reshape({1, 4, 4}), {2});
      },
      {"[adaptive_avg_pool2d]", "floating-point"});
  check_error([&] { adaptive_avg_pool2d(Tensor(), {2}); }, {"[adaptive_avg_pool2d]", "undefined"});
  check_error([] { nn::AdaptiveAvgPool2d({1, 2, 3}); }, {"[AdaptiveAvgPool2d]", "one value or two"});
}
