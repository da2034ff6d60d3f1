// pad: values and gradients against PyTorch 1.13 in every mode, other dtypes and strided inputs,
// gradcheck and gradgradcheck (pad_backward too), autocast rows, bad input.
#include <optional>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

TEST_CASE("pad: values and gradients match PyTorch in every mode") {
  struct Case {
    const char* mode;
    std::vector<int64_t> pads;
    std::optional<double> value;
    Shape in, out;
    std::vector<double> y, grad;
  };
  // tests/tools/ops2_reference.py pad: x = arange(24) reshaped to `in`, y = F.pad(x, pads, mode[, value]),
  // grad = d/dx of (y * w).sum() with w = arange(1, y.numel() + 1) of y's shape; float64.
  const std::vector<Case> cases = {
      {"constant",
       {1, 2, -1, 1},
       0.5,
       {1, 2, 3, 4},
       {1, 2, 3, 7},
       {0.5, 4,  5,  6,  7,  0.5, 0.5, 0.5, 8,  9,  10, 11, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
        0.5, 16, 17, 18, 19, 0.5, 0.5, 0.5, 20, 21, 22, 23, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5},
       {0, 0, 0, 0, 2, 3, 4, 5, 9, 10, 11, 12, 0, 0, 0, 0, 23, 24, 25, 26, 30, 31, 32, 33}},
      {"constant",
       {0, -2, 2, 0, 1, 1},
       -1.0,
       {1, 2, 3, 4},
       {1, 4, 5, 2},
       {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0,  1,  4,  5,  8,  9,
        -1, -1, -1, -1, 12, 13, 16, 17, 20, 21, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
       {15, 16, 0, 0, 17, 18, 0, 0, 19, 20, 0, 0, 25, 26, 0, 0, 27, 28, 0, 0, 29, 30, 0, 0}},
      {"reflect",
       {2, 1, 1, 2},
       std::nullopt,
       {1, 2, 3, 4},
       {1, 2, 6, 7},
       {6,  5,  4,  5,  6,  7,  6,  2,  1,  0,  1,  2,  3,  2,  6,  5,  4,  5,  6,  7,  6,  10, 9,  8,  9,  10, 11, 10,
        6,  5,  4,  5,  6,  7,  6,  2,  1,  0,  1,  2,  3,  2,  18, 17, 16, 17, 18, 19, 18, 14, 13, 12, 13, 14, 15, 14,
        18, 17, 16, 17, 18, 19, 18, 22, 21, 20, 21, 22, 23, 22, 18, 17, 16, 17, 18, 19, 18, 14, 13, 12, 13, 14, 15, 14},
       {48, 96, 152, 54, 51, 102, 165, 60, 24, 48, 76, 27, 132, 264, 404, 138, 177, 354, 543, 186, 66, 132, 202, 69}},
      {"reflect",
       {3, -1},
       std::nullopt,
       {2, 3, 4},
       {2, 3, 6},
       {3,  2,  1,  0,  1,  2,  7,  6,  5,  4,  5,  6,  11, 10, 9,  8,  9,  10,
        15, 14, 13, 12, 13, 14, 19, 18, 17, 16, 17, 18, 23, 22, 21, 20, 21, 22},
       {4, 8, 8, 1, 10, 20, 20, 7, 16, 32, 32, 13, 22, 44, 44, 19, 28, 56, 56, 25, 34, 68, 68, 31}},
      {"replicate",
       {1, 3, 2, 0},
       std::nullopt,
       {2, 3, 4},
       {2, 5, 8},
       {0,  0,  1,  2,  3,  3,  3,  3,  0,  0,  1,  2,  3,  3,  3,  3,  0,  0,  1,  2,  3,  3,  3,  3,  4,  4,  5,
        6,  7,  7,  7,  7,  8,  8,  9,  10, 11, 11, 11, 11, 12, 12, 13, 14, 15, 15, 15, 15, 12, 12, 13, 14, 15, 15,
        15, 15, 12, 12, 13, 14, 15, 15, 15, 15, 16, 16, 17, 18, 19, 19, 19, 19, 20, 20, 21, 22, 23, 23, 23, 23},
       {57, 33, 36, 174, 51, 27, 28, 122, 67, 35, 36, 154, 297, 153, 156, 654, 131, 67, 68, 282, 147, 75, 76, 314}},
      {"replicate",
       {1, 1, 0, 1, 1, 0},
       std::nullopt,
       {1, 2, 3, 4},
       {1, 3, 4, 6},
       {0,  0,  1,  2,  3,  3,  4,  4,  5,  6,  7,  7,  8,  8,  9,  10, 11, 11, 8,  8,  9,  10, 11, 11,
        0,  0,  1,  2,  3,  3,  4,  4,  5,  6,  7,  7,  8,  8,  9,  10, 11, 11, 8,  8,  9,  10, 11, 11,
        12, 12, 13, 14, 15, 15, 16, 16, 17, 18, 19, 19, 20, 20, 21, 22, 23, 23, 20, 20, 21, 22, 23, 23},
       {54, 30, 32, 70, 78, 42, 44, 94, 228, 120, 124, 260, 99, 51, 52, 107, 111, 57, 58, 119, 258, 132, 134, 274}},
      {"circular",
       {-1, 2, 3, 1},
       std::nullopt,
       {1, 2, 3, 4},
       {1, 2, 7, 5},
       {1,  2,  3,  1,  2,  5,  6,  7,  5,  6,  9,  10, 11, 9,  10, 1,  2,  3,  1,  2,  5,  6,  7,  5,
        6,  9,  10, 11, 9,  10, 1,  2,  3,  1,  2,  13, 14, 15, 13, 14, 17, 18, 19, 17, 18, 21, 22, 23,
        21, 22, 13, 14, 15, 13, 14, 17, 18, 19, 17, 18, 21, 22, 23, 21, 22, 13, 14, 15, 13, 14},
       {0, 105, 111, 54, 0, 60, 64, 31, 0, 80, 84, 41, 0, 315, 321, 159, 0, 200, 204, 101, 0, 220, 224, 111}},
      {"circular",
       {4, 0},
       std::nullopt,
       {2, 3, 4},
       {2, 3, 8},
       {0,  1,  2,  3,  0,  1,  2,  3,  4,  5,  6,  7,  4,  5,  6,  7,  8,  9,  10, 11, 8,  9,  10, 11,
        12, 13, 14, 15, 12, 13, 14, 15, 16, 17, 18, 19, 16, 17, 18, 19, 20, 21, 22, 23, 20, 21, 22, 23},
       {6, 8, 10, 12, 22, 24, 26, 28, 38, 40, 42, 44, 54, 56, 58, 60, 70, 72, 74, 76, 86, 88, 90, 92}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.mode);
    CAPTURE(c.pads.size());
    for (Dtype d : {kFloat64, kFloat32, kBFloat16}) {
      Tensor x = arange(0.0, 24.0, 1.0, TensorOptions(d)).reshape(c.in).requires_grad_();
      Tensor y = pad(x, c.pads, c.mode, c.value);
      REQUIRE(y.shape() == c.out);
      CHECK(y.dtype() == d);
      (y * arange(1.0, static_cast<double>(y.numel()) + 1, 1.0, TensorOptions(d)).reshape(y.shape())).sum().backward();
      check_close(y, tensor(c.y, c.out));
      check_close(x.grad(), tensor(c.grad, c.in), d == kBFloat16 ? test::Tolerance{0, 4e-3} : test::tolerance(d));
      // A strided input gives the same values.
      check_close(pad(non_contiguous(x.detach()), c.pads, c.mode, c.value), tensor(c.y, c.out));
    }
  }
}

TEST_CASE("pad: constant mode takes any dtype and dim count; empty results; 16-bit modes") {
  const Tensor i = arange(int64_t{6}).reshape({2, 3});
  const Tensor p = pad(i, {1, 0, 0, 1}, "constant", 7.0);
  CHECK(p.dtype() == kInt64);
  CHECK(p.to_vector<int64_t>() == std::vector<int64_t>{7, 0, 1, 2, 7, 3, 4, 5, 7, 7, 7, 7});
  CHECK(pad(i > int64_t{2}, {1, 1}).to_vector<bool>() ==
        std::vector<bool>{false, false, false, false, false, false, true, true, true, false});
  CHECK(pad(i, {-3, 0}).shape() == Shape{2, 0});  // cropped to nothing: empty, as PyTorch
  CHECK(pad(zeros({0, 3}), {1, 1}).shape() == Shape{0, 5});
  CHECK(pad(scalar_tensor(2.0), {}).item<float>() == 2.0f);  // no pads: a copy
  // Padding every dim of a 5-d tensor (constant mode has no dim limit).
  CHECK(pad(ones({1, 1, 1, 1, 1}), {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}).sum().item<float>() == 1.0f);
  // The non-constant modes on float16 copy values exactly.
  const Tensor h = randn({2, 3, 4}).to(kFloat16);
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    CAPTURE(mode);
    CHECK(test::bitwise_equal(pad(h, {2, 1}, mode), pad(h.to(kFloat64), {2, 1}, mode).to(kFloat16)));
  }
}

TEST_CASE("pad: autocast rows as PyTorch 1.13's CPU table (reflect and replicate in float32)") {
  const Tensor x = randn({1, 2, 4, 4}).to(kBFloat16);
  amp::AutocastGuard autocast(kCPU, kBFloat16);
  CHECK(pad(x, {1, 1, 1, 1}).dtype() == kBFloat16);
  CHECK(pad(x, {1, 1, 1, 1}, "reflect").dtype() == kFloat32);
  CHECK(pad(x, {1, 1, 1, 1}, "replicate").dtype() == kFloat32);
  CHECK(pad(x, {1, 1, 1, 1}, "circular").dtype() == kBFloat16);
}

TEST_CASE("pad: bad input names the op") {
  const Tensor x = randn({1, 2, 3, 4});
  check_error([&] { pad(x, {1, 1}, "wrap"); }, {"[pad]", "unknown mode 'wrap'"});
  check_error([&] { pad(x, {1, 1, 1}); }, {"[pad]", "even number"});
  check_error([&] { pad(randn({2}), {1, 1, 1, 1}); }, {"[pad]", "too many"});
  check_error([&] { pad(x, {-3, -2}); }, {"[pad]", "below zero"});
  check_error([&] { pad(Tensor(), {1, 1}); }, {"[pad]", "undefined"});
  check_error([&] { pad(x.select(0, 0), {4, 0}, "reflect"); }, {"[pad]", "smaller than the dim"});
  check_error([&] { pad(x, {1, 1}, "reflect", 2.0); }, {"[pad]", "takes no fill value"});
  check_error([&] { pad(x, {1, 1, 1, 1, 1, 1, 1, 1}, "replicate"); }, {"[pad]", "2, 4 or 6 pad values"});
  check_error([&] { pad(randn({3, 4}), {1, 1, 1, 1}, "reflect"); }, {"[pad]", "4-d input", "[3, 4]"});
  check_error([&] { pad(randn({3, 4}), {1, 1}, "circular"); }, {"[pad]", "3-d input"});
  check_error([&] { pad(x.select(0, 0), {5, 0}, "circular"); }, {"[pad]", "more than once"});
  check_error([&] { pad(x.select(0, 0), {-4, 0}, "replicate"); }, {"[pad]", "empty"});
  check_error([&] { pad(zeros({1, 2, 0}), {1, 1}, "replicate"); }, {"[pad]", "size 0"});
  check_error([&] { pad(arange(int64_t{8}).reshape({1, 2, 4}), {1, 1}, "reflect"); }, {"[pad]", "floating-point"});
}

TEST_CASE("pad: gradcheck and gradgradcheck in every mode, pad_backward on its own") {
  using autograd::gradcheck;
  using autograd::gradgradcheck;
  manual_seed(41);
  const Tensor x = randn({2, 3, 4, 5}, kFloat64);
  struct Mode {
    const char* mode;
    std::vector<int64_t> pads;
  };
  for (const Mode& m : std::vector<Mode>{{"constant", {1, -2, 2, 0}},
                                         {"reflect", {2, 3, 1, 2}},
                                         {"replicate", {3, 1, 0, 2}},
                                         {"circular", {-1, 2, 4, 1}}}) {
    CAPTURE(m.mode);
    auto f = [&](const TensorList& v) { return pad(v[0] * v[0], m.pads, m.mode); };
    CHECK(gradcheck(f, {x}));
    CHECK(gradgradcheck(f, {x}));
  }
  CHECK(gradcheck([](const TensorList& v) { return pad(v[0], {1, 2, 0, 1, 2, 1}, "reflect"); }, {randn({1, 3, 4, 3})}));
  CHECK(gradcheck([](const TensorList& v) { return pad(v[0], {2, 1}, "replicate"); }, {randn({3, 2})}));
  // pad_backward, in the output gradient (gradcheck evaluates fn with grad mode off: turn it on).
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    CAPTURE(mode);
    auto input_grad = [mode](const TensorList& v) {
      GradModeGuard grad_on(true);
      Tensor t = v[0].detach().requires_grad_();
      return autograd::grad({pad(t, {2, 1, 1, 2}, mode)}, {t}, {v[1]}, std::nullopt, true)[0];
    };
    CHECK(gradcheck(input_grad, {randn({1, 2, 3, 4}), randn({1, 2, 6, 7})}));
    CHECK(gradgradcheck(input_grad, {randn({1, 2, 3, 4}), randn({1, 2, 6, 7})}));
  }
}

TEST_CASE("pad modules: ZeroPad2d, ConstantPad2d, ReflectionPad2d, ReplicationPad2d") {
  manual_seed(42);
  const Tensor x = randn({1, 2, 4, 5});
  CHECK(test::bitwise_equal(nn::ZeroPad2d(2)(x), pad(x, {2, 2, 2, 2})));
  CHECK(test::bitwise_equal(nn::ConstantPad2d({1, 0, 2, 3}, -1.5)(x), pad(x, {1, 0, 2, 3}, "constant", -1.5)));
  CHECK(test::bitwise_equal(nn::ReflectionPad2d({3, 1, 0, 2})(x), pad(x, {3, 1, 0, 2}, "reflect")));
  CHECK(test::bitwise_equal(nn::ReplicationPad2d(1)(x.select(0, 0)), pad(x.select(0, 0), {1, 1, 1, 1}, "replicate")));
  CHECK(nn::ZeroPad2d(1).parameters().empty());
  CHECK(fmt::format("{}", nn::ConstantPad2d(1, 0.5)).find("ConstantPad2d(padding=[1, 1, 1, 1], value=0.5)") !=
        std::string::npos);
  check_error([] { nn::ReflectionPad2d({1, 2}); }, {"[ReflectionPad2d]", "one value or four"});
}
