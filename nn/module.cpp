#include "nn/module.h"

#include <ostream>
#include <set>

#include "framework/grad_mode.h"

namespace hg::nn {

Tensor Module::forward(const Tensor&) { fail(type_name_, "this module has no one-tensor forward"); }

Tensor Module::operator()(const Tensor& input) {
  if (hooks_->pre.empty() && hooks_->post.empty()) return forward(input);
  return run_hooked(input, [this](const Tensor& x) { return forward(x); });
}

Tensor Module::run_hooked(const Tensor& input, const std::function<Tensor(const Tensor&)>& body) {
  // Copies: a hook may remove itself (or register another) while they run.
  Tensor x = input;
  for (const auto& [id, fn] : std::vector(hooks_->pre))
    if (std::optional<Tensor> r = fn(*this, x)) x = std::move(*r);
  Tensor y = body(x);
  for (const auto& [id, fn] : std::vector(hooks_->post))
    if (std::optional<Tensor> r = fn(*this, x, y)) y = std::move(*r);
  return y;
}

namespace {
template <class List>
RemovableHandle add_hook(const std::shared_ptr<void>& owner, List& list, uint64_t id,
                         typename List::value_type::second_type fn, const char* what) {
  HG_CHECK(fn != nullptr, what, "the hook is empty");
  list.emplace_back(id, std::move(fn));
  return RemovableHandle([weak = std::weak_ptr<void>(owner), &list, id] {
    if (auto alive = weak.lock()) std::erase_if(list, [id](const auto& entry) { return entry.first == id; });
  });
}
}  // namespace

RemovableHandle Module::register_forward_pre_hook(ForwardPreHook fn) {
  return add_hook(hooks_, hooks_->pre, ++hooks_->next_id, std::move(fn), "register_forward_pre_hook");
}

RemovableHandle Module::register_forward_hook(ForwardHook fn) {
  return add_hook(hooks_, hooks_->post, ++hooks_->next_id, std::move(fn), "register_forward_hook");
}

void Module::check_new_name(const std::string& name) const {
  HG_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_,
           "invalid name '{}' (must be non-empty without '.')", name);
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  HG_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, "name '{}' is already registered",
           name);
}

Tensor& Module::register_parameter(const std::string& name, Tensor& slot, Tensor value, bool requires_grad) {
  check_new_name(name);
  HG_CHECK(value.defined() && value.is_floating_point(), type_name_,
           "parameter '{}' must be a defined floating-point tensor", name);
  slot = value.detach();
  if (requires_grad) slot.requires_grad_(true);
  params_.emplace_back(name, &slot);
  return slot;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& slot, Tensor value) {
  check_new_name(name);
  slot = value.defined() ? value.detach() : value;
  buffers_.emplace_back(name, &slot);
  return slot;
}

Tensor& Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name);  // before the slot exists, so a refused name leaves nothing behind
  return register_parameter(name, owned_slots_.emplace_back(), std::move(value), requires_grad);
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name);
  return register_buffer(name, owned_slots_.emplace_back(), std::move(value));
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  HG_CHECK(module != nullptr, type_name_, "submodule '{}' is null", name);
  children_.emplace_back(name, std::move(module));
}

Module::Named Module::all_named(bool recurse, bool buffers) const {
  Named out;
  for (const auto& [name, slot] : buffers ? buffers_ : params_)
    if (slot->defined()) out.emplace_back(name, *slot);
  if (!recurse) return out;
  for (const auto& [name, child] : children_)
    for (auto& [n, t] : child->all_named(true, buffers)) out.emplace_back(name + "." + n, std::move(t));
  return out;
}

namespace {
// Each tensor once, under the first of its names (PyTorch's remove_duplicate).
std::vector<std::pair<std::string, Tensor>> first_names(std::vector<std::pair<std::string, Tensor>> all,
                                                        std::set<const void*>& seen) {
  std::erase_if(all, [&](const auto& entry) { return !seen.insert(entry.second.impl()).second; });
  return all;
}
}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::set<const void*> seen;
  return first_names(all_named(recurse, false), seen);
}

TensorList Module::parameters(bool recurse) const {
  TensorList out;
  for (auto& [_, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::set<const void*> seen;
  return first_names(all_named(recurse, true), seen);
}

TensorList Module::buffers(bool recurse) const {
  TensorList out;
  for (auto& [_, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<const Module*> seen;
  auto visit = [&](auto& self, const std::string& prefix, Module& m) -> void {
    if (!seen.insert(&m).second) return;
    out.emplace_back(prefix, &m);
    for (auto& [name, child] : m.children_) self(self, prefix.empty() ? name : prefix + "." + name, *child);
  };
  visit(visit, "", *this);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [_, m] : named_modules()) out.push_back(m);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  HG_CHECK(fn != nullptr, "apply", "{}: the function is empty", type_name_);
  for (auto& [_, child] : children_) child->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::requires_grad_(bool requires_grad) {
  for (Tensor& p : parameters()) p.requires_grad_(requires_grad);
  return *this;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::append_repr(std::string& out, int indent) const {
  const std::string extra = extra_repr();
  const int64_t count = num_parameters();
  const std::string note = count ? fmt::format("  # {} parameter{}", count, count == 1 ? "" : "s") : "";
  out += type_name_ + "(";
  if (children_.empty()) {
    out += extra + ")" + note;
    return;
  }
  out += note + "\n";
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  if (!extra.empty()) out += pad + extra + "\n";  // as PyTorch: the config on a line of its own
  for (const auto& [name, child] : children_) {
    out += pad + "(" + name + "): ";
    child->append_repr(out, indent + 2);
    out += "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ') + ")";
}

std::string Module::to_string() const {
  std::string out;
  append_repr(out, 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.to_string(); }

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, child] : children_) child->train(on);
}

void Module::convert(Device device, std::optional<Dtype> dtype, MemoryFormat format) {
  std::map<const void*, Tensor> done;
  convert(device, dtype, format, done);
}

// `done` maps each tensor converted so far to its new self, so a tied tensor stays one tensor.
// (The keys are the old tensors' addresses: a slot not yet converted still holds its old tensor,
// so no address in the map can be a live unconverted tensor other than the one it names.)
void Module::convert(Device device, std::optional<Dtype> dtype, MemoryFormat format,
                     std::map<const void*, Tensor>& done) {
  NoGradGuard no_grad;
  const auto laid_out = [format](const Tensor& t) { return t.dim() == 4 ? t.contiguous(format) : t; };
  for (auto& [_, slot] : params_) {
    if (!slot->defined()) continue;
    auto [it, fresh] = done.try_emplace(slot->impl());
    if (fresh) {
      const bool rg = slot->requires_grad();
      it->second = laid_out(slot->to(device, dtype.value_or(slot->dtype()))).detach();
      if (rg) it->second.requires_grad_(true);
    }
    *slot = it->second;
  }
  for (auto& [_, slot] : buffers_) {
    if (!slot->defined()) continue;
    auto [it, fresh] = done.try_emplace(slot->impl());
    if (fresh) {
      const Dtype d = dtype && slot->is_floating_point() ? *dtype : slot->dtype();
      it->second = laid_out(slot->to(device, d)).detach();
    }
    *slot = it->second;
  }
  for (auto& [_, child] : children_) child->convert(device, dtype, format, done);
}

void Module::to(Device device) { convert(device, std::nullopt); }
void Module::to(Dtype dtype) {
  HG_CHECK(is_floating(dtype), "to", "a module converts to a floating-point dtype, got {}", dtype);
  // Each tensor stays where it is: use the device of the first one, or the CPU.
  const auto p = parameters();
  const auto b = buffers();
  convert(!p.empty() ? p[0].device() : (!b.empty() ? b[0].device() : Device(kCPU)), dtype);
}
void Module::to(Device device, Dtype dtype) {
  HG_CHECK(is_floating(dtype), "to", "a module converts to a floating-point dtype, got {}", dtype);
  convert(device, dtype);
}

void Module::to(MemoryFormat format) {
  HG_CHECK(format != MemoryFormat::Preserve, "to", "a module converts to contiguous_format or channels_last");
  const auto p = parameters();
  const auto b = buffers();
  convert(!p.empty() ? p[0].device() : (!b.empty() ? b[0].device() : Device(kCPU)), std::nullopt, format);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

StateDict Module::state_dict() const {
  // A tied tensor once, under its first name: a safetensors file cannot hold two names for one
  // tensor, and PyTorch's safetensors save_model drops the later names the same way.
  std::set<const void*> seen;
  StateDict out;
  for (auto& [n, t] : first_names(all_named(true, false), seen)) out[n] = t.detach();
  for (auto& [n, t] : first_names(all_named(true, true), seen)) out[n] = t.detach();
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  Named mine = all_named(true, false);
  for (auto& nb : all_named(true, true)) mine.push_back(nb);
  // A tied tensor is satisfied by any one of its names (a file saved with or without the others).
  std::map<const void*, int> found;
  for (const auto& [name, t] : mine) found[t.impl()] += static_cast<int>(state.count(name));
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> known;
  for (const auto& [name, t] : mine) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      if (found[t.impl()] == 0) missing.push_back(name);
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(
          fmt::format("'{}' has shape {} in the state dict, {} in the module", name, it->second.shape(), t.shape()));
    }
  }
  for (const auto& [name, _] : state)
    if (!known.count(name)) unexpected.push_back(name);
  std::vector<std::string> problems;
  if (strict && !missing.empty()) problems.push_back(fmt::format("missing keys: {}", fmt::join(missing, ", ")));
  if (strict && !unexpected.empty())
    problems.push_back(fmt::format("unexpected keys: {}", fmt::join(unexpected, ", ")));
  if (!mismatched.empty()) problems.push_back(fmt::format("shape mismatch: {}", fmt::join(mismatched, "; ")));
  HG_CHECK(problems.empty(), "load_state_dict", "{}: {}", type_name_, fmt::join(problems, "; "));

  NoGradGuard no_grad;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor dst = t;
    dst.copy_(it->second.to(t.device()));
  }
}

}  // namespace hg::nn

namespace hg {

void save(const nn::Module& module, const std::string& path, const Metadata& metadata) {
  save(module.state_dict(), path, metadata);
}

}  // namespace hg
