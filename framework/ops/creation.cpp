#include "framework/ops/creation.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>

#include "framework/ops/copy.h"
#include "framework/ops/copy_kernels.h"

namespace hg {

namespace {
std::mutex g_rng_mutex;
std::mt19937_64 g_rng{0x5eed};

// Fills a CPU float64 buffer with f(rng) under the generator lock.
template <class F>
std::vector<double> draw(int64_t n, F&& f) {
  std::vector<double> v(static_cast<size_t>(n));
  std::lock_guard lock(g_rng_mutex);
  for (double& x : v) x = f(g_rng);
  return v;
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  return tensor(values, shape, TensorOptions(kFloat64)).to(options.device_, options.dtype_);
}

Tensor finish_options(Tensor t, const TensorOptions& options) {
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  for (int64_t s : shape) HG_CHECK(s >= 0, "empty", "negative dimension in shape {}", shape);
  auto storage =
      std::make_shared<Storage>(static_cast<size_t>(numel_of(shape)) * element_size(options.dtype_), options.device_);
  return finish_options(Tensor(std::move(storage), shape, contiguous_strides(shape), 0, options.dtype_), options);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  Tensor t = empty(shape, options.requires_grad(false));
  if (t.numel()) fill_stub(t.device().type, t, value);
  return finish_options(t, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, TensorOptions(t.dtype()).device(t.device()));
}
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  HG_CHECK(step != 0, "arange", "step must be non-zero");
  HG_CHECK(std::isfinite(start) && std::isfinite(end), "arange", "start ({}) and end ({}) must be finite", start, end);
  HG_CHECK((end - start) / step >= 0, "arange", "range [{}, {}) cannot be walked with step {}", start, end, step);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return finish_options(from_doubles(v, {n}, options.requires_grad(false)), options);
}
Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }
Tensor arange(int64_t end) { return arange(0.0, static_cast<double>(end), 1.0, TensorOptions(kInt64)); }

Tensor rand(const Shape& shape, TensorOptions options) {
  HG_CHECK(is_floating(options.dtype_), "rand", "expected a floating-point dtype, got {}", options.dtype_);
  auto v = draw(numel_of(shape), uniform01);
  return finish_options(from_doubles(v, shape, options.requires_grad(false)), options);
}

Tensor randn(const Shape& shape, TensorOptions options) {
  HG_CHECK(is_floating(options.dtype_), "randn", "expected a floating-point dtype, got {}", options.dtype_);
  const int64_t n = numel_of(shape);
  std::vector<double> v(static_cast<size_t>(n));
  {
    std::lock_guard lock(g_rng_mutex);
    for (int64_t i = 0; i < n; i += 2) {  // Box-Muller, two normals per pair of uniforms
      const double u1 = 1.0 - uniform01(g_rng), u2 = uniform01(g_rng);
      const double r = std::sqrt(-2.0 * std::log(u1));
      v[static_cast<size_t>(i)] = r * std::cos(2 * M_PI * u2);
      if (i + 1 < n) v[static_cast<size_t>(i + 1)] = r * std::sin(2 * M_PI * u2);
    }
  }
  return finish_options(from_doubles(v, shape, options.requires_grad(false)), options);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options) {
  HG_CHECK(low < high, "randint", "empty range [{}, {})", low, high);
  const auto span = static_cast<uint64_t>(high - low);
  std::vector<int64_t> v(static_cast<size_t>(numel_of(shape)));
  {
    std::lock_guard lock(g_rng_mutex);
    std::uniform_int_distribution<uint64_t> dist(0, span - 1);
    for (auto& x : v) x = low + static_cast<int64_t>(dist(g_rng));
  }
  return tensor(v, shape).to(options.device_, options.dtype_);
}

void manual_seed(uint64_t seed) {
  std::lock_guard lock(g_rng_mutex);
  g_rng.seed(seed);
}

uint64_t random_u64() {
  std::lock_guard lock(g_rng_mutex);
  return g_rng();
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  HG_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "tensor",
           "{} values do not fill shape {} ({} elements)", values.size(), shape, numel_of(shape));
  Tensor host = empty(shape, TensorOptions(dtype_of<T>));
  if (!values.empty()) {
    if constexpr (std::is_same_v<T, bool>) {
      auto* p = static_cast<bool*>(host.raw_data());
      for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    } else {
      std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
    }
  }
  return finish_options(host.to(options.device_, options.dtype_), options);
}

template <class T>
Tensor tensor(const std::vector<T>& values, TensorOptions options) {
  return tensor(values, Shape{static_cast<int64_t>(values.size())}, options);
}

#define HG_INSTANTIATE_TENSOR(T)                                                 \
  template Tensor tensor<T>(const std::vector<T>&, const Shape&, TensorOptions); \
  template Tensor tensor<T>(const std::vector<T>&, TensorOptions);
HG_INSTANTIATE_TENSOR(float)
HG_INSTANTIATE_TENSOR(double)
HG_INSTANTIATE_TENSOR(Half)
HG_INSTANTIATE_TENSOR(BFloat16)
HG_INSTANTIATE_TENSOR(int64_t)
HG_INSTANTIATE_TENSOR(int32_t)
HG_INSTANTIATE_TENSOR(uint8_t)
HG_INSTANTIATE_TENSOR(bool)
#undef HG_INSTANTIATE_TENSOR

}  // namespace hg
