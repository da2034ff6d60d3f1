#include "framework/ops/creation.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <string_view>

#include "framework/capture_state.h"
#include "framework/op.h"
#include "framework/ops/copy.h"
#include "framework/ops/copy_kernels.h"
#include "framework/ops/random.h"

namespace hg {

namespace {
std::mutex g_rng_mutex;
std::mt19937_64 g_rng{0x5eed};

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

Tensor from_doubles(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  return tensor(values, shape, TensorOptions(kFloat64)).to(options.device_, options.dtype_);
}

// The one allocation path of every new tensor: sizes checked, then storage asked for, with a
// failure reported as "[op] cannot allocate ..." naming the shape, the bytes and what is held.
Tensor allocate(const Shape& shape, Dtype dtype, Device device, std::string_view op) {
  const size_t bytes = static_cast<size_t>(checked_numel(shape, op, element_size(dtype))) * element_size(dtype);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(bytes, device);
  } catch (const Error& e) {
    fail(op, "cannot allocate a {} tensor of shape {} on {} ({} bytes): {}", dtype, shape, device, bytes, e.what());
  } catch (const std::bad_alloc&) {
    fail(op, "cannot allocate a {} tensor of shape {} on {} ({} bytes): out of memory", dtype, shape, device, bytes);
  }
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

// A CPU float64 tensor of `shape` filled with f(rng) under the generator lock.
template <class F>
Tensor draw(const Shape& shape, std::string_view op, F&& f) {
  Tensor t = allocate(shape, kFloat64, Device(kCPU), op);
  auto* p = static_cast<double*>(t.raw_data());
  const int64_t n = t.numel();
  std::lock_guard lock(g_rng_mutex);
  f(g_rng, p, n);
  return t;
}

Tensor finish_options(Tensor t, const TensorOptions& options) {
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  const std::string_view outer = current_op_name();
  Tensor t = allocate(shape, options.dtype_, options.device_, outer.empty() ? std::string_view("empty") : outer);
  return finish_options(t, options);
}

Tensor empty(const Shape& shape, TensorOptions options, MemoryFormat format) {
  Tensor t = empty(shape, options.requires_grad(false));
  if (format == MemoryFormat::Contiguous || t.is_contiguous(format)) return finish_options(t, options);
  const std::string_view outer = current_op_name();
  const Tensor laid_out(t.storage(), shape, format_strides(shape, format, outer.empty() ? "empty" : outer), 0,
                        t.dtype());
  return finish_options(laid_out, options);
}

namespace {
Tensor filled(const Shape& shape, double value, const TensorOptions& options, std::string_view op) {
  const std::string_view outer = current_op_name();
  Tensor t = allocate(shape, options.dtype_, options.device_, outer.empty() ? op : outer);
  if (t.numel()) fill_stub(t.device().type, t, value);
  return finish_options(t, options);
}
}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions options) { return filled(shape, value, options, "full"); }
Tensor zeros(const Shape& shape, TensorOptions options) { return filled(shape, 0.0, options, "zeros"); }
Tensor ones(const Shape& shape, TensorOptions options) { return filled(shape, 1.0, options, "ones"); }
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
  const double count = std::ceil((end - start) / step);
  HG_CHECK(count < 0x1p62, "arange", "range [{}, {}) with step {} has too many elements ({})", start, end, step, count);
  const auto n = static_cast<int64_t>(count);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return finish_options(from_doubles(v, {n}, options.requires_grad(false)), options);
}
Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }
Tensor arange(int64_t end) { return arange(0.0, static_cast<double>(end), 1.0, TensorOptions(kInt64)); }

Tensor rand(const Shape& shape, TensorOptions options) {
  HG_CHECK(is_floating(options.dtype_), "rand", "expected a floating-point dtype, got {}", options.dtype_);
  Tensor v = draw(shape, "rand", [](std::mt19937_64& rng, double* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i) p[i] = uniform01(rng);
  });
  return finish_options(v.to(options.device_, options.dtype_), options);
}

Tensor randn(const Shape& shape, TensorOptions options) {
  HG_CHECK(is_floating(options.dtype_), "randn", "expected a floating-point dtype, got {}", options.dtype_);
  Tensor v = draw(shape, "randn", [](std::mt19937_64& rng, double* p, int64_t n) {
    for (int64_t i = 0; i < n; i += 2) {  // Box-Muller, two normals per pair of uniforms
      const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);
      const double r = std::sqrt(-2.0 * std::log(u1));
      p[i] = r * std::cos(2 * M_PI * u2);
      if (i + 1 < n) p[i + 1] = r * std::sin(2 * M_PI * u2);
    }
  });
  return finish_options(v.to(options.device_, options.dtype_), options);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options) {
  HG_CHECK(low < high, "randint", "empty range [{}, {})", low, high);
  const uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  Tensor v = allocate(shape, kInt64, Device(kCPU), "randint");
  auto* p = static_cast<int64_t*>(v.raw_data());
  {
    std::lock_guard lock(g_rng_mutex);
    std::uniform_int_distribution<uint64_t> dist(0, span - 1);
    for (int64_t i = 0; i < v.numel(); ++i) p[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + dist(g_rng));
  }
  return v.to(options.device_, options.dtype_);
}

void manual_seed(uint64_t seed) {
  std::lock_guard lock(g_rng_mutex);
  g_rng.seed(seed);
}

namespace {
// The state's bytes: this tag, then the engine's standard text form (its 312 words and position).
constexpr std::string_view kRngTag = "hg-mt19937_64\n";
}  // namespace

Tensor get_rng_state() {
  std::ostringstream text;
  {
    std::lock_guard lock(g_rng_mutex);
    text << g_rng;
  }
  const std::string bytes = std::string(kRngTag) + text.str();
  return tensor(std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

void set_rng_state(const Tensor& state) {
  HG_CHECK(state.defined() && state.dtype() == kUInt8 && state.dim() == 1, "set_rng_state",
           "expected the 1-d uint8 tensor get_rng_state returns, got {}",
           state.defined() ? fmt::format("{} of shape {}", state.dtype(), state.shape()) : "an undefined tensor");
  const std::vector<uint8_t> bytes = state.to(kCPU).contiguous().to_vector<uint8_t>();
  const std::string text(bytes.begin(), bytes.end());
  HG_CHECK(text.starts_with(kRngTag), "set_rng_state", "not a state from get_rng_state ({} bytes without its tag)",
           bytes.size());
  std::istringstream in(text.substr(kRngTag.size()));
  std::mt19937_64 restored;
  in >> restored;
  const bool read = !in.fail();
  in >> std::ws;
  HG_CHECK(read && in.eof(), "set_rng_state", "the state is truncated or altered ({} bytes)", bytes.size());
  std::lock_guard lock(g_rng_mutex);
  g_rng = restored;
}

uint64_t random_u64() {
  // Inside a capture the CUDA random kernels read their seed from the graph's table at this slot.
  if (const auto slot = capture::take_seed_slot()) return *slot;
  std::lock_guard lock(g_rng_mutex);
  return g_rng();
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  const int64_t n = checked_numel(shape, "tensor");
  HG_CHECK(n == static_cast<int64_t>(values.size()), "tensor", "{} values do not fill shape {} ({} elements)",
           values.size(), shape, n);
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
