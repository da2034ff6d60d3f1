// hg::nn::Module: the base of every layer. A module registers its parameters, buffers and
// submodules by name, and the base walks them for parameters(), to(), state_dict() and friends.
//
//   struct Net : hg::nn::Module {
//     std::shared_ptr<hg::nn::Linear> fc = register_module("fc", std::make_shared<hg::nn::Linear>(4, 2));
//     hg::Tensor forward(const hg::Tensor& x) override { return (*fc)(x); }
//   };
//
// Call a module as module(x): that runs its forward pre-hooks, forward, then its forward hooks
// (as PyTorch's __call__); calling forward() directly skips the hooks. A module whose forward takes
// more arguments derives from CallableModule<Self> (below), so module(x, mask) runs them too.
// fmt::print("{}", module) (or std::cout << module) prints the tree as PyTorch's repr, with
// parameter counts.
//
// A tensor registered under two names (weight tying: head->weight = emb->weight) is one
// parameter, as in PyTorch: parameters(), named_parameters() and state_dict() list it once, under
// the first name met, and load_state_dict() accepts a file holding either name or both.
#pragma once

#include <fmt/format.h>

#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/tensor.h"
#include "serialize/safetensors.h"

namespace hg::nn {

class Module;
// fn(module, input) runs before forward and may return a replacement input.
using ForwardPreHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
// fn(module, input, output) runs after forward and may return a replacement output.
using ForwardHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input, const Tensor& output)>;

class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  // Parameters are registered by address, so a module never moves or copies.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. Modules that take one tensor override this; the default throws.
  virtual Tensor forward(const Tensor& input);
  // forward wrapped in the forward hooks.
  Tensor operator()(const Tensor& input);
  // Each returns a handle whose remove() unregisters the hook (the handle may outlive the module).
  RemovableHandle register_forward_pre_hook(ForwardPreHook fn);
  RemovableHandle register_forward_hook(ForwardHook fn);
  // Whether any forward pre-hook or forward hook is registered (a fused Sequential, nn/fuse.h,
  // fuses only modules without them, so every hook sees the tensors it would see unfused).
  bool has_forward_hooks() const { return !hooks_->pre.empty() || !hooks_->post.empty(); }
  const std::string& type_name() const { return type_name_; }
  // The key configuration shown inside the parentheses when printed, as PyTorch's extra_repr:
  // "in_features=4, out_features=2, bias=true". Layers override it; the default is empty.
  virtual std::string extra_repr() const { return ""; }
  // The tree as PyTorch prints it: "Type(extra)" for a leaf, children indented one per line as
  // "(name): ...", and "  # N parameters" after each module that holds any (the root's is the total).
  std::string to_string() const;

  // ---- walking the tree (names are dotted paths: "0.weight", "fc1.bias") ----
  // Each tensor once, under the first name met (a tied weight is one parameter).
  TensorList parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // This module (named "") and every module below it, depth first, each once however often it is
  // registered (as PyTorch's named_modules). The pointers live as long as this module.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // Runs fn on every child's tree, then on this module (PyTorch's apply, e.g. to initialise
  // weights); returns *this.
  Module& apply(const std::function<void(Module&)>& fn);
  int64_t num_parameters() const;

  // ---- modes and conversions ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves parameters and buffers; to(dtype) converts only floating-point ones (as PyTorch).
  // Gradients are dropped. Throws "[to] ..." for a device without a backend.
  void to(Device device);
  void to(Dtype dtype);
  void to(Device device, Dtype dtype);
  // As PyTorch's module.to(memory_format=...): every 4-d parameter and buffer (convolution
  // weights) laid out in `format` (ChannelsLast or Contiguous), the others left as they are.
  void to(MemoryFormat format);
  void zero_grad(bool set_to_none = true);
  // Sets requires_grad on every parameter of the tree (freezing a submodule: sub->requires_grad_(false)).
  Module& requires_grad_(bool requires_grad = true);

  // ---- checkpoints ----
  // Parameters and buffers by dotted name; the tensors alias the module's (as PyTorch's do):
  // clone them to keep a snapshot while training goes on.
  StateDict state_dict() const;
  // Copies values in (converting dtypes). strict: a missing or unexpected key is an error;
  // a shape mismatch always is. Errors name every offending key.
  void load_state_dict(const StateDict& state, bool strict = true);

  // ---- registration (public, as PyTorch's: a module can be extended from outside) ----
  // Registers a member tensor as a parameter (requires grad) or a buffer; returns it. The slot
  // is read through on every walk, so assigning to the member (head->weight = emb->weight)
  // changes what is registered.
  Tensor& register_parameter(const std::string& name, Tensor& slot, Tensor value, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor& slot, Tensor value);
  // The same, with the slot kept by the module (no member to hold it); returns the slot.
  Tensor& register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 protected:
  // Runs body(input) inside this module's forward hooks: the pre-hooks may replace input, the
  // forward hooks the output (what operator() does around forward).
  Tensor run_hooked(const Tensor& input, const std::function<Tensor(const Tensor&)>& body);

 private:
  using Named = std::vector<std::pair<std::string, Tensor>>;
  void check_new_name(const std::string& name) const;
  // Every registered name, a tied tensor under each of its names.
  Named all_named(bool recurse, bool buffers) const;
  // format: what 4-d tensors become (Preserve: each keeps its own).
  void convert(Device device, std::optional<Dtype> dtype, MemoryFormat format, std::map<const void*, Tensor>& done);
  void convert(Device device, std::optional<Dtype> dtype, MemoryFormat format = MemoryFormat::Preserve);
  void append_repr(std::string& out, int indent) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::deque<Tensor> owned_slots_;  // a deque: registered slots must not move
  struct Hooks {
    uint64_t next_id = 0;
    std::vector<std::pair<uint64_t, ForwardPreHook>> pre;
    std::vector<std::pair<uint64_t, ForwardHook>> post;
  };
  std::shared_ptr<Hooks> hooks_ = std::make_shared<Hooks>();  // handles hold it weakly
};

std::ostream& operator<<(std::ostream& os, const Module& module);

// The base of a module whose forward takes more than one tensor (MultiheadAttention's
// forward(q, k, v), a block's forward(x, mask)): module(args...) calls the Derived forward that
// takes them, inside the hooks. The hooks see the first argument as the input (a pre-hook may
// replace it) and the output, as a one-tensor call shows them.
//   struct Block : hg::nn::CallableModule<Block> {
//     Block() : CallableModule("Block") {}
//     hg::Tensor forward(const hg::Tensor& x, const hg::Tensor& mask);
//   };
//   block(x, mask);
// A forward may return a struct with a Tensor member `output` beside other results (an LSTM's
// output and its final state): module(args...) returns that struct, and the forward hooks see
// (and may replace) its `output`, as PyTorch's hooks see an RNN's output tuple's first element.
template <class Derived>
class CallableModule : public Module {
 public:
  using Module::Module;
  template <class... Args>
  auto operator()(const Tensor& input, Args&&... args) {
    auto& self = static_cast<Derived&>(*this);
    using Result = decltype(self.forward(input, std::forward<Args>(args)...));
    if (!has_forward_hooks()) return self.forward(input, std::forward<Args>(args)...);
    if constexpr (std::is_same_v<Result, Tensor>) {
      return run_hooked(input, [&](const Tensor& x) { return self.forward(x, std::forward<Args>(args)...); });
    } else {
      std::optional<Result> full;
      Tensor out = run_hooked(input, [&](const Tensor& x) {
        full.emplace(self.forward(x, std::forward<Args>(args)...));
        return full->output;
      });
      full->output = std::move(out);
      return std::move(*full);
    }
  }
};

}  // namespace hg::nn

// fmt::print("{}", model) for Module and every subclass.
template <class M>
struct fmt::formatter<M, char, std::enable_if_t<std::is_base_of_v<hg::nn::Module, M>>>
    : fmt::formatter<std::string_view> {
  auto format(const hg::nn::Module& m, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(m.to_string(), ctx);
  }
};

namespace hg {

// Saves module.state_dict() as a safetensors checkpoint (hg::save's atomic write).
void save(const nn::Module& module, const std::string& path, const Metadata& metadata = {});

}  // namespace hg
