// Conv2d, MaxPool2d, AvgPool2d, LayerNorm, BatchNorm2d modules: init, forward against float64
// loops, gradients, state_dict round trip.
#include <cmath>

#include "nn_helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::values;

TEST_CASE("Conv2d: init bounds, forward against a float64 loop, gradients, state_dict") {
  manual_seed(3);
  nn::Conv2d conv(2, 3, 3, {.padding = {1, 1}});
  CHECK(conv.weight.shape() == Shape{3, 2, 3, 3});
  const double bound = 1.0 / std::sqrt(2.0 * 9);
  for (double w : values(conv.weight)) CHECK(std::abs(w) <= bound);
  for (double b : values(conv.bias)) CHECK(std::abs(b) <= bound);

  Tensor x = randn({2, 2, 4, 5});
  const auto xv = values(x), wv = values(conv.weight), bv = values(conv.bias);
  std::vector<double> ref(2 * 3 * 4 * 5);
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 3; ++o)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w) {
          double s = bv[o];
          for (int c = 0; c < 2; ++c)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                const int hh = h + i - 1, ww = w + j - 1;
                if (hh < 0 || hh >= 4 || ww < 0 || ww >= 5) continue;
                s += xv[((n * 2 + c) * 4 + hh) * 5 + ww] * wv[((o * 2 + c) * 3 + i) * 3 + j];
              }
          ref[((n * 3 + o) * 4 + h) * 5 + w] = s;
        }
  check_close(conv(x), tensor(ref, {2, 3, 4, 5}), {1e-5, 1e-5});

  nn::Conv2d small(2, 2, 2, {.stride = {2, 1}, .bias = true});
  hg::test::check_module_gradients(small, randn({1, 2, 4, 3}));
  small.to(kFloat32);
  nn::Conv2d other(2, 2, 2);
  hg::test::check_state_dict_round_trip(small, other);
  check_error([] { nn::Conv2d(3, 4, 3, {.groups = 2}); }, {"[Conv2d]", "groups"});
}

TEST_CASE("MaxPool2d and AvgPool2d against float64 loops, with gradients") {
  Tensor x = randn({1, 2, 4, 4}, kFloat64);
  const auto xv = values(x);
  std::vector<double> mx, av;
  for (int c = 0; c < 2; ++c)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 2; ++w) {
        double m = -INFINITY, s = 0;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j) {
            const double v = xv[(c * 4 + 2 * h + i) * 4 + 2 * w + j];
            m = std::max(m, v);
            s += v;
          }
        mx.push_back(m);
        av.push_back(s / 4);
      }
  nn::MaxPool2d maxpool(2);
  nn::AvgPool2d avgpool(2);
  check_close(maxpool(x), tensor(mx, {1, 2, 2, 2}));
  check_close(avgpool(x), tensor(av, {1, 2, 2, 2}));
  CHECK(maxpool.parameters().empty());
  hg::test::check_module_gradients(maxpool, x);
  hg::test::check_module_gradients(avgpool, x);
  nn::AvgPool2d padded(3, {.stride = {1, 1}, .padding = {1, 1}, .count_include_pad = false});
  hg::test::check_module_gradients(padded, randn({1, 1, 3, 3}));
}

TEST_CASE("LayerNorm against float64, gradients, state_dict") {
  nn::LayerNorm ln({4});
  CHECK(values(ln.weight) == std::vector<double>{1, 1, 1, 1});
  Tensor x = randn({3, 4});
  const auto xv = values(x);
  std::vector<double> ref;
  for (int r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 4; ++i) m += xv[r * 4 + i] / 4;
    for (int i = 0; i < 4; ++i) v += (xv[r * 4 + i] - m) * (xv[r * 4 + i] - m) / 4;
    for (int i = 0; i < 4; ++i) ref.push_back((xv[r * 4 + i] - m) / std::sqrt(v + 1e-5));
  }
  check_close(ln(x), tensor(ref, {3, 4}), {1e-5, 1e-4});
  {
    NoGradGuard ng;
    ln.weight.copy_(tensor(std::vector<float>{0.5, 1, 2, -1}));
    ln.bias.copy_(tensor(std::vector<float>{0, 1, 0, 1}));
  }
  hg::test::check_module_gradients(ln, randn({2, 4}));
  ln.to(kFloat32);
  nn::LayerNorm other({4});
  hg::test::check_state_dict_round_trip(ln, other);
  CHECK(nn::LayerNorm(4, {.elementwise_affine = false}).parameters().empty());
}

TEST_CASE("BatchNorm2d: batch statistics and running stats in training, running stats in eval") {
  nn::BatchNorm2d bn(2);
  CHECK(bn.state_dict().size() == 5);
  Tensor x = randn({3, 2, 2, 2});
  const auto xv = values(x);
  std::vector<double> mean(2, 0), var(2, 0);
  for (int n = 0; n < 3; ++n)
    for (int c = 0; c < 2; ++c)
      for (int s = 0; s < 4; ++s) mean[c] += xv[(n * 2 + c) * 4 + s] / 12;
  for (int n = 0; n < 3; ++n)
    for (int c = 0; c < 2; ++c)
      for (int s = 0; s < 4; ++s) var[c] += std::pow(xv[(n * 2 + c) * 4 + s] - mean[c], 2) / 12;
  std::vector<double> ref(xv.size());
  for (int n = 0; n < 3; ++n)
    for (int c = 0; c < 2; ++c)
      for (int s = 0; s < 4; ++s) {
        const int i = (n * 2 + c) * 4 + s;
        ref[i] = (xv[i] - mean[c]) / std::sqrt(var[c] + 1e-5);
      }
  check_close(bn(x), tensor(ref, {3, 2, 2, 2}), {1e-5, 1e-4});
  // running = 0.9 running + 0.1 batch (unbiased variance).
  check_close(bn.running_mean, tensor(std::vector<double>{0.1 * mean[0], 0.1 * mean[1]}).to(kFloat32));
  check_close(bn.running_var,
              tensor(std::vector<double>{0.9 + 0.1 * var[0] * 12 / 11, 0.9 + 0.1 * var[1] * 12 / 11}).to(kFloat32));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

  bn.eval();
  std::vector<double> eval_ref(xv.size());
  const auto rm = values(bn.running_mean), rv = values(bn.running_var);
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 4) % 2;
    eval_ref[i] = (xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5);
  }
  check_close(bn(x), tensor(eval_ref, {3, 2, 2, 2}), {1e-5, 1e-4});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

  nn::BatchNorm2d g(2);
  hg::test::check_module_gradients(g, randn({2, 2, 2, 1}));
  g.eval();
  hg::test::check_module_gradients(g, randn({2, 2, 2, 1}));
  nn::BatchNorm2d other(2);
  bn.to(kFloat32);
  hg::test::check_state_dict_round_trip(bn, other);
  CHECK(other.num_batches_tracked.dtype() == kInt64);
  check_error([&] { bn(randn({2, 3, 2, 2})); }, {"[BatchNorm2d]", "[N, 2, H, W]"});
}
