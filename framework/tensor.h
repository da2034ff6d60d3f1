// hg::Tensor: a strided view over shared storage, with an optional autograd slot.
// Ops live in framework/ops/; the methods here forward to them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/shape.h"

namespace hg {

namespace autograd {
class Node;  // defined by the autograd layer; the tensor core only holds a pointer to it
}
namespace indexing {
class TensorIndex;  // framework/ops/tensor_index.h
}

// A block of memory on one device. `version` counts in-place writes, so autograd can tell
// when a tensor saved for backward was modified.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::atomic<uint32_t> version{0};
  // version + 1 while every value in the block is known to be finite: set by a kernel that wrote
  // the whole block and saw no inf or NaN on the way (the widening cast notes it in the same pass),
  // stale as soon as an in-place write moves the version. 0: not known. GradScaler::step reads it
  // to skip its own pass over gradients (framework/ops/internal.h, note_all_finite).
  std::atomic<uint32_t> finite_at_version_plus_one{0};

  Storage(size_t nbytes, Device device);  // allocates through the device's allocator
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorOptions {
  Dtype dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(Dtype d) : dtype_(d) {}        // NOLINT: implicit, so zeros({2}, kFloat16) works
  TensorOptions(Device d) : device_(d) {}      // NOLINT
  TensorOptions(DeviceType d) : device_(d) {}  // NOLINT
  TensorOptions dtype(Dtype d) const {
    auto o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
};

struct AutogradMeta;
struct TensorImpl;
class Tensor;
using TensorList = std::vector<Tensor>;

// A gradient hook (Tensor::register_hook): gets the gradient, returns a replacement or an
// undefined Tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;

// What the register_*hook functions return: remove() unregisters the hook. Copies share one
// registration; remove() is idempotent, and destroying the handle does not remove (as PyTorch).
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remove)
      : remove_(std::make_shared<std::function<void()>>(std::move(remove))) {}
  void remove() {
    if (remove_ && *remove_) std::exchange(*remove_, nullptr)();
  }

 private:
  std::shared_ptr<std::function<void()>> remove_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A tensor viewing `storage` with the given geometry.
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, Dtype dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const;
  int64_t offset() const;
  Dtype dtype() const;
  Device device() const;
  bool is_contiguous() const;
  // Dense in `format`'s order (framework/shape.h): is_contiguous(MemoryFormat::ChannelsLast) as
  // PyTorch's is_contiguous(memory_format=torch.channels_last).
  bool is_contiguous(MemoryFormat format) const;
  MemoryFormat suggest_memory_format() const { return hg::suggest_memory_format(shape(), strides()); }
  bool is_floating_point() const { return is_floating(dtype()); }
  const std::shared_ptr<Storage>& storage() const;
  // Pointer to the first element (storage data + offset).
  void* raw_data() const;
  template <class T>
  T* data_ptr() const {
    check_dtype_for_access(dtype_of<T>, "data_ptr");
    return static_cast<T*>(raw_data());
  }
  // Identity of the underlying TensorImpl (two Tensor handles can share it).
  const TensorImpl* impl() const { return impl_.get(); }
  // The shared implementation (for the autograd and view machinery).
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // How many Tensor handles share this TensorImpl (0 when undefined). With storage().use_count()
  // (how many TensorImpls view the storage) it tells a tensor that no one else can see.
  long use_count() const { return impl_.use_count(); }

  // Reading values (copies to the CPU when needed). item() needs exactly one element.
  template <class T>
  T item() const;
  template <class T>
  std::vector<T> to_vector() const;
  std::string to_string() const;  // PyTorch-style repr

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  // A copy of the handle (undefined when no gradient has arrived): another thread's backward may
  // replace .grad while the caller holds it.
  Tensor grad() const;
  void set_grad(Tensor grad) const;
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // libtorch's order; retain_graph defaults to create_graph. create_graph records the backward
  // formulas, so the gradients themselves have a grad_fn (higher-order gradients).
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  // fn runs on this tensor's gradient when backward computes it (for a leaf: before it is
  // accumulated into .grad; for a non-leaf: when it reaches its grad_fn) and may replace it.
  RemovableHandle register_hook(GradHook fn) const;
  template <class F>
  requires std::is_void_v<std::invoke_result_t<F, const Tensor&>> RemovableHandle register_hook(F fn)
  const {  // a hook that only looks
    return register_hook(GradHook([fn = std::move(fn)](const Tensor& g) {
      fn(g);
      return Tensor();
    }));
  }
  // Leaves only: fn(tensor) runs once per backward, after this backward's gradient was
  // accumulated into .grad.
  RemovableHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  void retain_grad() const;
  bool retains_grad() const;
  Tensor detach() const;                // shares storage, no autograd history
  AutogradMeta* autograd_meta() const;  // nullptr when the tensor never took part in autograd
  AutogradMeta& ensure_autograd_meta() const;
  uint32_t version() const;
  void bump_version() const;

  // ---- views (share storage) ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  // This tensor when it is dense in `format` already, else a copy laid out so (recorded like
  // contiguous()). Preserve keeps a channels-last tensor's format and makes others contiguous.
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;

  // ---- conversion ----
  Tensor to(Dtype dtype) const;
  Tensor to(Device device) const;
  Tensor to(DeviceType device) const { return to(Device(device)); }
  Tensor to(Device device, Dtype dtype) const;
  // As PyTorch's to(device, dtype, memory_format=...): the conversion, then the layout of `format`.
  Tensor to(Device device, Dtype dtype, MemoryFormat format) const;
  Tensor to(MemoryFormat format) const { return contiguous(format); }

  // ---- elementwise ----
  Tensor add(const Tensor& other, double alpha = 1.0) const;
  Tensor sub(const Tensor& other, double alpha = 1.0) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor pow(double exponent) const;
  Tensor abs() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor relu() const;
  Tensor gelu(bool tanh_approximation = false) const;
  Tensor softplus(double beta = 1.0, double threshold = 20.0) const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  Tensor clamp(const Tensor& min, const Tensor& max) const;  // an undefined Tensor() is no bound

  // ---- reductions ----
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  // var/std/norm: an empty dims list means every dim (statistics.h).
  Tensor var(const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor norm(double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor cumsum(int64_t dim, std::optional<Dtype> dtype = std::nullopt) const;

  // ---- shape, order, sampling (shaping.h, triangular.h, sorting.h, categorical.h) ----
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& split_sizes, int64_t dim = 0) const;
  Tensor repeat(const std::vector<int64_t>& repeats) const;
  Tensor flip(const std::vector<int64_t>& dims) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  std::pair<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false) const;

  // ---- indexing as libtorch: x.index({Slice(1, None), 0, "..."}) (tensor_index.h) ----
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& value);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, double value);

  // ---- linear algebra, softmax ----
  Tensor mm(const Tensor& other) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- in place (bump the version counter) ----
  // Recorded by autograd as in PyTorch: the tensor's history moves on to the in-place op, and
  // one on a view rewrites its base's history (docs/GUIDE.md, "In-place operations"). On a
  // leaf that requires grad (or a view of one) they throw unless grad mode is off.
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& relu_();
  Tensor& clamp_(std::optional<double> min, std::optional<double> max);
  Tensor& masked_fill_(const Tensor& mask, double value);

 private:
  void check_dtype_for_access(Dtype wanted, const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// What autograd keeps for a tensor. Filled by the autograd layer; the core only stores it.
// Guards a leaf's .grad and hook lists: backward passes on several threads may reach the same leaf
// (PyTorch's AccumulateGrad takes such a lock). Recursive, because a post-accumulate-grad hook runs
// under it and may read or set .grad. A copied meta gets a lock of its own.
struct AutogradLock {
  std::recursive_mutex mutex;
  AutogradLock() = default;
  AutogradLock(const AutogradLock&) {}
  AutogradLock& operator=(const AutogradLock&) { return *this; }
  void lock() { mutex.lock(); }
  void unlock() { mutex.unlock(); }
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  // A leaf's warm autocast cast (optim/warm_cast.h), held opaquely: the core defines no amp or
  // optimizer state, it only keeps the slot alive with the leaf.
  std::shared_ptr<void> warm_cast;
  uint32_t view_version = 0;  // a view's grad_fn matches its base's history as of this version
  // A leaf's hooks, by id (a non-leaf's gradient hooks live on its grad_fn, which outlives it).
  std::vector<std::pair<uint64_t, GradHook>> grad_hooks;
  std::vector<std::pair<uint64_t, std::function<void()>>> post_accumulate_grad_hooks;
  // Taken to read or write grad, grad_hooks and post_accumulate_grad_hooks.
  mutable AutogradLock lock;
};

// What a tensor made by a view op (slice, select, view, transpose, ...) with grad mode on knows
// of its base: the tensor that owns the history, and how to make the same view of another
// tensor of the base's shape (the view ops replayed). An in-place op on the view rewrites the
// base's history through it, and the view's own history is remade from the base's when the
// storage was written since (framework/view_history.h).
struct ViewInfo {
  std::shared_ptr<TensorImpl> base;
  std::function<Tensor(const Tensor&)> replay;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  Dtype dtype = kFloat32;
  std::shared_ptr<AutogradMeta> autograd;
  std::shared_ptr<const ViewInfo> view;  // set for views made with grad mode on
};

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
// In place (add_, sub_, mul_, div_), recorded by autograd like them.
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, double b);
Tensor& operator-=(Tensor& a, double b);
Tensor& operator*=(Tensor& a, double b);
Tensor& operator/=(Tensor& a, double b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);

}  // namespace hg

template <>
struct fmt::formatter<hg::Tensor> : fmt::formatter<std::string_view> {
  auto format(const hg::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(t.to_string(), ctx);
  }
};
