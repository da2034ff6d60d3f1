#include "framework/optim/sgd.h"

#include "framework/ops/binary.h"

namespace hg::optim {

SGD::SGD(TensorList params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), options_(options), nesterov_(options.nesterov) {
  HG_CHECK(options.momentum >= 0, "SGD", "invalid momentum {}", options.momentum);
  HG_CHECK(options.weight_decay >= 0, "SGD", "invalid weight_decay {}", options.weight_decay);
  HG_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0), "SGD",
           "nesterov momentum needs momentum > 0 and dampening 0");
}

std::map<std::string, double*> SGD::hyperparameters() {
  return {{"momentum", &options_.momentum},
          {"dampening", &options_.dampening},
          {"weight_decay", &options_.weight_decay},
          {"nesterov", &nesterov_}};
}

void SGD::update(size_t i, const Tensor& param, const Tensor& grad) {
  options_.nesterov = nesterov_ != 0;
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

}  // namespace hg::optim
