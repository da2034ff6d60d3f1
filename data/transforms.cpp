#include "data/transforms.h"

#include <cmath>

#include "framework/ops/creation.h"

namespace hg::data {

namespace {

Tensor& field_of(Sample& sample, size_t field, const char* op) {
  HG_CHECK(field < sample.size(), op, "field {} asked of a sample with {} fields", field, sample.size());
  return sample[field];
}

template <class T>
void normalize_loop(const T* x, T* y, int64_t channels, int64_t inner, const std::vector<double>& mean,
                    const std::vector<double>& std) {
  for (int64_t c = 0; c < channels; ++c) {
    const size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(c);
    const T m = static_cast<T>(mean[k]), inv = static_cast<T>(1.0 / std[k]);
    for (int64_t i = c * inner; i < (c + 1) * inner; ++i) y[i] = (x[i] - m) * inv;
  }
}

}  // namespace

Compose::Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    HG_CHECK(static_cast<bool>(transforms_[i]), "Compose", "transform {} is empty", i);
}

Sample Compose::operator()(Sample sample) const {
  for (const Transform& t : transforms_) sample = t(std::move(sample));
  return sample;
}

Lambda::Lambda(std::function<Tensor(const Tensor&)> fn, size_t field) : fn_(std::move(fn)), field_(field) {
  HG_CHECK(static_cast<bool>(fn_), "Lambda", "the function is empty");
}

Sample Lambda::operator()(Sample sample) const {
  Tensor& t = field_of(sample, field_, "Lambda");
  t = fn_(t);
  return sample;
}

Normalize::Normalize(std::vector<double> mean, std::vector<double> std, size_t field)
    : mean_(std::move(mean)), std_(std::move(std)), field_(field) {
  HG_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize",
           "needs as many means as stds (at least one), got {} and {}", mean_.size(), std_.size());
  for (size_t i = 0; i < std_.size(); ++i)
    HG_CHECK(std::isfinite(mean_[i]) && std::isfinite(std_[i]) && std_[i] != 0, "Normalize",
             "mean {} and std {} of channel {}: need finite values and a non-zero std", mean_[i], std_[i], i);
}

Sample Normalize::operator()(Sample sample) const {
  Tensor& t = field_of(sample, field_, "Normalize");
  HG_CHECK(t.defined() && t.device().is_cpu(), "Normalize", "field {} must be a CPU tensor", field_);
  const int64_t channels = static_cast<int64_t>(mean_.size());
  HG_CHECK(channels == 1 || (t.dim() >= 1 && t.size(0) == channels), "Normalize",
           "{} channel means for field {} of shape {}: dim 0 must have {} channels", channels, field_, t.shape(),
           channels);
  const Dtype out_dtype = is_floating(t.dtype()) ? t.dtype() : kFloat32;
  const Dtype work = out_dtype == kFloat64 ? kFloat64 : kFloat32;
  const Tensor x = t.to(work).contiguous();
  Tensor y = empty(x.shape(), work);
  const int64_t c = channels == 1 ? 1 : channels;
  const int64_t inner = c == 0 ? 0 : x.numel() / c;
  if (work == kFloat64)
    normalize_loop(static_cast<const double*>(x.raw_data()), static_cast<double*>(y.raw_data()), c, inner, mean_, std_);
  else
    normalize_loop(static_cast<const float*>(x.raw_data()), static_cast<float*>(y.raw_data()), c, inner, mean_, std_);
  t = out_dtype == work ? y : y.to(out_dtype);
  return sample;
}

}  // namespace hg::data
