#include "optim/sgd.h"

#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/optim_update_kernels.h"

namespace hg::optim {

namespace {
void check_sgd(double momentum, double dampening, double weight_decay, double nesterov) {
  HG_CHECK(momentum >= 0, "SGD", "invalid momentum {}", momentum);
  HG_CHECK(weight_decay >= 0, "SGD", "invalid weight_decay {}", weight_decay);
  HG_CHECK(nesterov == 0 || nesterov == 1, "SGD", "invalid nesterov {} (expected 0 or 1)", nesterov);
  HG_CHECK(nesterov == 0 || (momentum > 0 && dampening == 0), "SGD",
           "nesterov momentum needs momentum > 0 and dampening 0");
}
}  // namespace

SGD::SGD(TensorList params, SGDOptions options) : Optimizer(std::move(params), options.lr, "SGD"), options_{options} {
  check_sgd(options.momentum, options.dampening, options.weight_decay, options.nesterov ? 1 : 0);
}

SGD::SGD(std::vector<SGDParamGroup> groups) : Optimizer("SGD") {
  HG_CHECK(!groups.empty(), "SGD", "needs at least one parameter group");
  for (SGDParamGroup& g : groups) add_param_group(std::move(g));
}

void SGD::add_param_group(SGDParamGroup group) {
  const SGDOptions& o = group.options;
  check_sgd(o.momentum, o.dampening, o.weight_decay, o.nesterov ? 1 : 0);
  add_group(std::move(group.params), o.lr);
  options_.push_back(o);
}

SGDOptions SGD::options(size_t group) const {
  const double group_lr = lr(group);  // checks the group index
  SGDOptions o = options_[group];
  o.lr = group_lr;
  return o;
}

void SGD::check_hyperparameters(const std::map<std::string, double>& v) const {
  check_sgd(v.at("momentum"), v.at("dampening"), v.at("weight_decay"), v.at("nesterov"));
}

std::map<std::string, Optimizer::Hyperparameter> SGD::hyperparameters(size_t group) {
  SGDOptions& o = options_.at(group);
  return {{"momentum", &o.momentum},
          {"dampening", &o.dampening},
          {"weight_decay", &o.weight_decay},
          {"nesterov", &o.nesterov}};
}

// Loaded buffers count as having taken their first gradient: forget the ready flags so the next
// fused step sets them to 1 for every parameter that has a buffer.
void SGD::load_state_dict(const StateDict& state) {
  Optimizer::load_state_dict(state);
  buffer_ready_.clear();
}

// The fused kernel is the one implementation of the update. A strided parameter that is not dense
// (a view into a larger tensor) is updated through a contiguous copy: copy in, fused update, copy
// back. A channels-last one is updated in place (internal::is_dense), its state kept in its layout.
void SGD::update(size_t i, const Tensor& param, const Tensor& grad) {
  if (internal::is_dense(param)) return update_fused(i, param, grad);
  const Tensor dense = contiguous(param);
  update_fused(i, dense, grad);
  Tensor(param).copy_(dense);
}

// One fused kernel per parameter. On CUDA it reads the skip flag on the device; on the CPU
// Optimizer::step has already read it on the host (the kernel honours it all the same).
Tensor SGD::momentum_buffer(size_t i, const Tensor& param, Tensor& ready) {
  if (options_[group_of(i)].momentum == 0) return Tensor();
  if (buffer_ready_.size() != state_.size()) buffer_ready_.resize(state_.size());
  auto it = state_[i].find("momentum_buffer");
  if (it == state_[i].end()) {
    it = state_[i].emplace("momentum_buffer", zeros_like_param(param)).first;
    buffer_ready_[i] = zeros({1}, TensorOptions(kInt32).device(param.device()));
  } else if (!buffer_ready_[i].defined() || buffer_ready_[i].device() != param.device()) {
    buffer_ready_[i] = full({1}, 1.0, TensorOptions(kInt32).device(param.device()));  // a loaded buffer
  }
  // A buffer loaded from another dtype, device or layout is converted once, to what the kernel reads.
  if (it->second.strides() != param.strides() || it->second.dtype() != param.dtype() ||
      it->second.device() != param.device())
    it->second = like_param(it->second, param);
  ready = buffer_ready_[i];
  return it->second;
}

// One fused kernel per parameter. On CUDA it reads the skip flag on the device; on the CPU
// Optimizer::step has already read it on the host (the kernel honours it all the same).
void SGD::update_fused(size_t i, const Tensor& param, const Tensor& grad) {
  HG_CHECK(internal::is_dense(param), name(), "parameter {} must be dense on {} (shape {}, strides {})", i,
           param.device(), param.shape(), param.strides());
  const Tensor g = like_param(grad, param);
  const size_t group = group_of(i);
  const SGDOptions& o = options_[group];
  Tensor ready;
  const Tensor buf = momentum_buffer(i, param, ready);
  const Tensor cast_out = warm_cast_output(param);
  sgd_update_stub(param.device().type, param, g, buf, ready, skip_flag(param.device()), cast_out,
                  SgdHyper{lr(group), o.momentum, o.dampening, o.weight_decay, o.nesterov, grad_unscale()});
  param.bump_version();
  publish_warm_cast(param, cast_out);
}

std::vector<double> SGD::kernel_hyperparameters(size_t group) const {
  const SGDOptions& o = options_.at(group);
  std::vector<double> v(kSgdHyperSize);
  v[kSgdLr] = lr(group);
  v[kSgdMomentum] = o.momentum;
  v[kSgdDampening] = o.dampening;
  v[kSgdWeightDecay] = o.weight_decay;
  return v;
}

// One multi-tensor kernel call for the listed parameters (one group, device and dtype): the
// learning rate and the other options come from the group's hyper tensor on that device.
void SGD::update_multi(size_t group, const std::vector<size_t>& indices) {
  TensorList ps, grads, bufs, ready, casts;
  for (size_t i : indices) {
    const Tensor& p = params()[i];
    ps.push_back(p);
    grads.push_back(contiguous(to(p.grad(), p.device(), p.dtype())));
    Tensor r;
    if (Tensor b = momentum_buffer(i, p, r); b.defined()) {
      bufs.push_back(std::move(b));
      ready.push_back(std::move(r));
    }
    casts.push_back(warm_cast_output(p));
  }
  const Device device = ps.front().device();
  sgd_multi_update_stub(device.type, ps, grads, bufs, ready, skip_flag(device), casts, hyper_tensor(group, device),
                        options_[group].nesterov, grad_unscale());
  for (size_t k = 0; k < ps.size(); ++k) {
    ps[k].bump_version();
    publish_warm_cast(ps[k], casts[k]);
  }
}

}  // namespace hg::optim
