// A leaf's autocast cast kept warm across autocast regions (docs/AMP.md, "What the training step
// fuses"): amp's cast cache sets `dtype` when it caches a cast of the leaf, the fused optimizer step
// then writes `value` (the updated weights rounded to dtype) beside the new float32 weights, and
// the next region uses it instead of casting again while the leaf's version is still `version`.
#pragma once

#include <memory>
#include <mutex>

#include "framework/tensor.h"

namespace hg::optim {

struct WarmCast {
  Dtype dtype = kFloat32;
  Tensor value;
  uint32_t version = 0;
};

// The leaf's warm cast, kept in AutogradMeta's opaque slot; null when it has none. The caller
// holds meta.lock where other threads may set it.
inline std::shared_ptr<WarmCast> warm_cast_of(const AutogradMeta& meta) {
  return std::static_pointer_cast<WarmCast>(meta.warm_cast);
}
inline void set_warm_cast(AutogradMeta& meta, std::shared_ptr<WarmCast> warm) { meta.warm_cast = std::move(warm); }

// For inspection (tests, tools): the tensor's warm cast, read under its lock; null when none.
inline std::shared_ptr<WarmCast> warm_cast_of(const Tensor& leaf) {
  const auto& meta = leaf.impl()->autograd;
  if (!meta) return nullptr;
  std::lock_guard lock(meta->lock);
  return warm_cast_of(*meta);
}

}  // namespace hg::optim
