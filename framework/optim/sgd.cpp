#include "framework/optim/sgd.h"

#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/optim/fused.h"

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

SGD::SGD(TensorList params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options), nesterov_(options.nesterov) {
  check_sgd(options.momentum, options.dampening, options.weight_decay, options.nesterov ? 1 : 0);
}

void SGD::check_hyperparameters(const std::map<std::string, double>& v) const {
  check_sgd(v.at("momentum"), v.at("dampening"), v.at("weight_decay"), v.at("nesterov"));
}

std::map<std::string, double*> SGD::hyperparameters() {
  return {{"momentum", &options_.momentum},
          {"dampening", &options_.dampening},
          {"weight_decay", &options_.weight_decay},
          {"nesterov", &nesterov_}};
}

// Loaded buffers count as having taken their first gradient: forget the ready flags so the next
// fused step sets them to 1 for every parameter that has a buffer.
void SGD::load_state_dict(const StateDict& state) {
  Optimizer::load_state_dict(state);
  buffer_ready_.clear();
}

void SGD::update(size_t i, const Tensor& param, const Tensor& grad) {
  options_.nesterov = nesterov_ != 0;
  if (param.device().is_cuda() || fusable(i, param)) return update_fused(i, param, grad);
  Tensor p = param;
  Tensor d = grad;
  if (options_.weight_decay != 0) d = d + param * options_.weight_decay;
  if (options_.momentum != 0) {
    auto it = state_[i].find("momentum_buffer");
    if (it == state_[i].end()) {
      it = state_[i].emplace("momentum_buffer", d.to(param.dtype()).clone().contiguous()).first;
    } else {
      it->second.mul_(options_.momentum).add_(d, 1.0 - options_.dampening);
    }
    d = options_.nesterov ? d + it->second * options_.momentum : it->second;
  }
  p.add_(d, -lr());
}

// The fused kernel needs a contiguous parameter and, once it exists, a contiguous momentum
// buffer of the parameter's dtype; anything else (a strided parameter, a buffer loaded from
// another dtype) takes the composed path above.
bool SGD::fusable(size_t i, const Tensor& param) const {
  if (!param.is_contiguous()) return false;
  if (options_.momentum == 0) return true;
  auto it = state_[i].find("momentum_buffer");
  return it == state_[i].end() ||
         (it->second.is_contiguous() && it->second.dtype() == param.dtype() && it->second.device() == param.device());
}

// One fused kernel per parameter. On CUDA it reads the skip flag on the device; on the CPU
// Optimizer::step has already read it on the host (the kernel honours it all the same).
void SGD::update_fused(size_t i, const Tensor& param, const Tensor& grad) {
  HG_CHECK(param.is_contiguous(), name(), "parameter {} must be contiguous on {} (shape {}, strides {})", i,
           param.device(), param.shape(), param.strides());
  const Tensor g = contiguous(to(grad, param.device(), param.dtype()));
  Tensor buf, ready;
  if (options_.momentum != 0) {
    if (buffer_ready_.size() != state_.size()) buffer_ready_.resize(state_.size());
    auto it = state_[i].find("momentum_buffer");
    if (it == state_[i].end()) {
      it = state_[i].emplace("momentum_buffer", zeros_like(param)).first;
      buffer_ready_[i] = zeros({1}, TensorOptions(kInt32).device(param.device()));
    } else if (!buffer_ready_[i].defined() || buffer_ready_[i].device() != param.device()) {
      buffer_ready_[i] = full({1}, 1.0, TensorOptions(kInt32).device(param.device()));  // a loaded buffer
    }
    HG_CHECK(it->second.is_contiguous() && it->second.dtype() == param.dtype() && it->second.device() == param.device(),
             name(), "momentum_buffer of parameter {} must be a contiguous {} tensor on {}", i, param.dtype(),
             param.device());
    buf = it->second;
    ready = buffer_ready_[i];
  }
  sgd_update_stub(param.device().type, param, g, buf, ready, skip_flag(param.device()),
                  SgdHyper{lr(), options_.momentum, options_.dampening, options_.weight_decay, options_.nesterov});
  param.bump_version();
}

}  // namespace hg::optim
