#include "nn/init.h"

#include <cmath>

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

void kaiming_uniform_(Tensor& t, double a) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fans(t).first));
  uniform_(t, -bound, bound);
}

}  // namespace hg::nn::init
