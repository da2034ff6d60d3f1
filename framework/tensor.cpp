// Tensor accessors, storage and the autograd slot. Ops are in framework/ops/.
#include "framework/tensor.h"

#include <cstring>

#include "framework/allocator.h"
#include "framework/capture_state.h"
#include "framework/cuda_backend.h"
#include "framework/dispatch.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/copy.h"
#include "framework/view_history.h"

namespace hg {

Storage::Storage(size_t n, Device d) : nbytes(n), device(d) {
  // An empty CUDA tensor allocates nothing but still loads the CUDA backend, so the ops it meets
  // find their CUDA kernels (a missing backend is reported by those ops).
  if (n == 0 && d.type == kCUDA) cuda::load_backend();
  data = n ? get_allocator(d.type)->allocate(n, d) : nullptr;
}

Storage::~Storage() {
  if (!data) return;
  if (device.type == kCPU) {
    if (Allocator* owner = release_adopted_cpu_block(data)) {
      owner->deallocate(data, nbytes, device);
      return;
    }
  }
  get_allocator(device.type)->deallocate(data, nbytes, device);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, Dtype dtype) {
  // Every tensor, view or not, passes here: a shape whose count overflows or a view that reaches
  // past its storage is refused before any kernel can index with it.
  HG_CHECK(storage != nullptr, "tensor", "no storage");
  checked_numel(shape, "tensor", element_size(dtype));
  check_view_bounds(shape, strides, offset, static_cast<int64_t>(storage->nbytes / element_size(dtype)), "tensor");
  impl_ = std::make_shared<TensorImpl>(
      TensorImpl{std::move(storage), std::move(shape), std::move(strides), offset, dtype, nullptr});
}

namespace {
const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  HG_CHECK(impl != nullptr, "tensor", "use of an undefined tensor");
  return *impl;
}
}  // namespace

const Shape& Tensor::shape() const { return checked(impl_).shape; }
const Strides& Tensor::strides() const { return checked(impl_).strides; }
int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[normalize_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return numel_of(shape()); }
int64_t Tensor::offset() const { return checked(impl_).offset; }
Dtype Tensor::dtype() const { return checked(impl_).dtype; }
Device Tensor::device() const { return checked(impl_).storage->device; }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked(impl_).storage; }

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  HG_CHECK(format != MemoryFormat::Preserve, "is_contiguous", "preserve_format is not a layout a tensor can have");
  return has_format(shape(), strides(), format);
}

void* Tensor::raw_data() const {
  const auto& impl = checked(impl_);
  if (!impl.storage->data) return nullptr;
  return static_cast<char*>(impl.storage->data) + impl.offset * static_cast<int64_t>(element_size(impl.dtype));
}

void Tensor::check_dtype_for_access(Dtype wanted, const char* what) const {
  HG_CHECK(dtype() == wanted, what, "tensor has dtype {}, accessed as {}", dtype(), wanted);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(Device(kCPU), dtype_of<T>).contiguous();
  const auto* p = static_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}

template <class T>
T Tensor::item() const {
  HG_CHECK(numel() == 1, "item", "a tensor with {} elements (shape {}) cannot be converted to a scalar", numel(),
           shape());
  capture::refuse_host_sync("item", device(), "read a tensor's value on the host (item)");
  // On the CPU the value is read where it lies, converted as the cast kernel converts it, with
  // no tensor copied (a GradScaler step and a logged loss read one every iteration).
  if (device().is_cpu()) {
    // (Half and BFloat16 convert only to float, exactly, then on: the kernel's order.)
    return dispatch_any_dtype(dtype(),
                              [&]<class S>(TypeTag<S>) { return static_cast<T>(*static_cast<const S*>(raw_data())); });
  }
  return to_vector<T>()[0];
}

#define HG_INSTANTIATE_READERS(T)                       \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
HG_INSTANTIATE_READERS(float)
HG_INSTANTIATE_READERS(double)
HG_INSTANTIATE_READERS(Half)
HG_INSTANTIATE_READERS(BFloat16)
HG_INSTANTIATE_READERS(int64_t)
HG_INSTANTIATE_READERS(int32_t)
HG_INSTANTIATE_READERS(uint8_t)
HG_INSTANTIATE_READERS(bool)
HG_INSTANTIATE_READERS(Float8E4M3)
HG_INSTANTIATE_READERS(Float8E5M2)
#undef HG_INSTANTIATE_READERS

// ---- autograd slot ----

AutogradMeta* Tensor::autograd_meta() const { return checked(impl_).autograd.get(); }

AutogradMeta& Tensor::ensure_autograd_meta() const {
  auto& meta = checked(impl_).autograd;
  if (!meta) const_cast<TensorImpl&>(*impl_).autograd = std::make_shared<AutogradMeta>();
  return *impl_->autograd;
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd_meta();
  return (m && (m->requires_grad || m->grad_fn)) || view_of_tensor_requiring_grad(*this);
}

Tensor& Tensor::requires_grad_(bool on) {
  HG_CHECK(is_leaf() || on, "requires_grad_",
           "cannot turn off requires_grad on a non-leaf tensor; use detach() instead");
  HG_CHECK(!on || is_floating_point(), "requires_grad_",
           "only floating-point tensors can require gradients, this one is {}", dtype());
  ensure_autograd_meta().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = autograd_meta();
  if (!m) return Tensor();
  std::lock_guard lock(m->lock);
  return m->grad;
}

void Tensor::set_grad(Tensor grad) const {
  if (grad.defined()) {
    HG_CHECK(grad.shape() == shape(), "set_grad", "gradient of shape {} does not match tensor shape {}", grad.shape(),
             shape());
    // As PyTorch's .grad setter: a gradient of another dtype or device would reach optimizers
    // and the GradScaler as if it were this tensor's.
    HG_CHECK(grad.dtype() == dtype(), "set_grad", "gradient of dtype {} does not match tensor dtype {}", grad.dtype(),
             dtype());
    HG_CHECK(grad.device() == device(), "set_grad", "gradient on {} does not match tensor device {}", grad.device(),
             device());
  }
  AutogradMeta& meta = ensure_autograd_meta();
  std::lock_guard lock(meta.lock);
  meta.grad = std::move(grad);
}

bool Tensor::is_leaf() const {
  refresh_view_history(*this);
  const AutogradMeta* m = autograd_meta();
  return !m || !m->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  refresh_view_history(*this);
  const AutogradMeta* m = autograd_meta();
  return m ? m->grad_fn : kNone;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd_hooks().backward({*this}, {gradient}, retain_graph.value_or(create_graph), create_graph);
}

namespace {
uint64_t next_hook_id() {
  static std::atomic<uint64_t> id{0};
  return ++id;
}

// A handle that erases hook `id` from the list `member` of `meta` (if the meta still exists).
template <class List>
RemovableHandle erase_from(const std::shared_ptr<AutogradMeta>& meta, List AutogradMeta::*member, uint64_t id) {
  return RemovableHandle([weak = std::weak_ptr<AutogradMeta>(meta), member, id] {
    if (auto m = weak.lock()) {
      std::lock_guard lock(m->lock);
      std::erase_if((*m).*member, [id](const auto& entry) { return entry.first == id; });
    }
  });
}
}  // namespace

RemovableHandle Tensor::register_hook(GradHook fn) const {
  HG_CHECK(requires_grad(), "register_hook", "cannot register a hook on a tensor that does not require grad");
  HG_CHECK(fn != nullptr, "register_hook", "the hook is empty");
  if (!is_leaf()) return autograd_hooks().register_node_hook(*this, std::move(fn));
  const uint64_t id = next_hook_id();
  const auto& meta = impl_->autograd;
  std::lock_guard lock(meta->lock);
  meta->grad_hooks.emplace_back(id, std::move(fn));
  return erase_from(meta, &AutogradMeta::grad_hooks, id);
}

RemovableHandle Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  HG_CHECK(requires_grad(), "register_post_accumulate_grad_hook",
           "cannot register a hook on a tensor that does not require grad");
  HG_CHECK(is_leaf(), "register_post_accumulate_grad_hook",
           "post-accumulate-grad hooks can only be registered on leaf tensors (this one has a grad_fn)");
  HG_CHECK(fn != nullptr, "register_post_accumulate_grad_hook", "the hook is empty");
  const uint64_t id = next_hook_id();
  const auto& meta = impl_->autograd;
  // The meta cannot name its tensor: the hook keeps a weak link to it (no cycle impl -> meta -> impl).
  std::lock_guard lock(meta->lock);
  meta->post_accumulate_grad_hooks.emplace_back(id, [weak = std::weak_ptr<TensorImpl>(impl_), fn = std::move(fn)] {
    if (auto impl = weak.lock()) fn(Tensor(std::move(impl)));
  });
  return erase_from(meta, &AutogradMeta::post_accumulate_grad_hooks, id);
}

void Tensor::retain_grad() const {
  HG_CHECK(requires_grad(), "retain_grad", "the tensor does not require grad");
  if (!is_leaf()) ensure_autograd_meta().retains_grad = true;
}

bool Tensor::retains_grad() const {
  const AutogradMeta* m = autograd_meta();
  return m && m->retains_grad;
}

Tensor Tensor::detach() const {
  const auto& impl = checked(impl_);
  return Tensor(impl.storage, impl.shape, impl.strides, impl.offset, impl.dtype);
}

uint32_t Tensor::version() const { return storage()->version.load(std::memory_order_relaxed); }
void Tensor::bump_version() const { storage()->version.fetch_add(1, std::memory_order_relaxed); }

}  // namespace hg
