#include "nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"

namespace hg::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& weight) {
  HG_CHECK(weight.dim() >= 2, "init", "fan in/out need a weight of at least 2 dims, got shape {}", weight.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

void uniform_(Tensor& t, double low, double high) {
  NoGradGuard no_grad;
  t.copy_(rand(t.shape(), kFloat64) * (high - low) + low);
}

void normal_(Tensor& t, double mean, double std) {
  NoGradGuard no_grad;
  t.copy_(randn(t.shape(), kFloat64) * std + mean);
}

void constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}
void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  for (std::string_view linear :
       {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"})
    if (nonlinearity == linear) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "selu") return 3.0 / 4.0;
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  fail("calculate_gain", "unsupported nonlinearity '{}'", nonlinearity);
}

namespace {
int64_t fan(const Tensor& t, FanMode mode, const char* op) {
  HG_CHECK(t.dim() >= 2, op, "fan in/out need a tensor of at least 2 dims, got shape {}", t.shape());
  const auto [in, out] = fans(t);
  const int64_t f = mode == FanMode::FanIn ? in : out;
  HG_CHECK(f > 0, op, "the fan of a tensor of shape {} is 0", t.shape());
  return f;
}
double xavier_std(const Tensor& t, double gain, const char* op) {
  HG_CHECK(t.dim() >= 2, op, "fan in/out need a tensor of at least 2 dims, got shape {}", t.shape());
  const auto [in, out] = fans(t);
  HG_CHECK(in + out > 0, op, "fan_in + fan_out of a tensor of shape {} is 0", t.shape());
  return gain * std::sqrt(2.0 / static_cast<double>(in + out));
}
}  // namespace

void xavier_uniform_(Tensor& t, double gain) {
  const double bound = std::sqrt(3.0) * xavier_std(t, gain, "xavier_uniform_");
  uniform_(t, -bound, bound);
}

void xavier_normal_(Tensor& t, double gain) { normal_(t, 0.0, xavier_std(t, gain, "xavier_normal_")); }

void kaiming_uniform_(Tensor& t, double a, FanMode mode, std::string_view nonlinearity) {
  const double gain = calculate_gain(nonlinearity, a);
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan(t, mode, "kaiming_uniform_")));
  uniform_(t, -bound, bound);
}

void kaiming_normal_(Tensor& t, double a, FanMode mode, std::string_view nonlinearity) {
  const double gain = calculate_gain(nonlinearity, a);
  normal_(t, 0.0, gain / std::sqrt(static_cast<double>(fan(t, mode, "kaiming_normal_"))));
}

void trunc_normal_(Tensor& t, double mean, double std, double a, double b) {
  HG_CHECK(std > 0 && a < b, "trunc_normal_", "need std > 0 and a < b, got std {}, a {}, b {}", std, a, b);
  // Rejection in batches: only the values outside [a, b] are drawn again. PyTorch samples the
  // inverse CDF instead (no erfinv here); the distribution is the same. An interval deep in a
  // tail accepts few draws, so the rounds are capped and what is left is clamped.
  std::vector<double> v = (randn(t.shape(), kFloat64) * std + mean).to_vector<double>();
  std::vector<size_t> bad;
  for (size_t i = 0; i < v.size(); ++i)
    if (!(v[i] >= a && v[i] <= b)) bad.push_back(i);
  for (int round = 0; round < 10000 && !bad.empty(); ++round) {
    const std::vector<double> draw =
        (randn({static_cast<int64_t>(bad.size())}, kFloat64) * std + mean).to_vector<double>();
    std::vector<size_t> still;
    for (size_t k = 0; k < bad.size(); ++k) {
      v[bad[k]] = draw[k];
      if (!(draw[k] >= a && draw[k] <= b)) still.push_back(bad[k]);
    }
    bad.swap(still);
  }
  for (size_t i : bad) v[i] = std::min(std::max(v[i], a), b);
  NoGradGuard no_grad;
  t.copy_(tensor(v, t.shape()));
}

}  // namespace hg::nn::init
