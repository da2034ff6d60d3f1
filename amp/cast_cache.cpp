#include "amp/cast_cache.h"

#include <map>
#include <mutex>
#include <utility>

#include "amp/autocast_scope.h"
#include "framework/autocast_state.h"
#include "framework/grad_mode.h"
#include "framework/inference_mode.h"
#include "framework/ops/copy.h"
#include "framework/ops/internal.h"
#include "optim/warm_cast.h"

namespace hg::amp {

namespace {
struct Entry {
  Tensor source;  // held so its TensorImpl address cannot be reused by another tensor meanwhile
  uint32_t version;
  Tensor cast;
};
thread_local std::map<std::pair<const TensorImpl*, Dtype>, Entry> t_cache;
}  // namespace

bool is_cacheable(const Tensor& t, Dtype dtype) {
  return autocast_nesting_depth() > 0 && autocast_state()[t.device().type].cache_enabled &&
         !is_inference_mode_enabled() && is_reduced_float(dtype) && t.dtype() == kFloat32 && t.is_leaf() &&
         t.requires_grad() && internal::owns_whole_storage(t);
}

Tensor cast_for_autocast(const Tensor& t, Dtype dtype) {
  if (t.dtype() == dtype) return t;
  if (!is_cacheable(t, dtype)) return to(t, t.device(), dtype);
  const auto key = std::make_pair(t.impl(), dtype);
  auto it = t_cache.find(key);
  if (it != t_cache.end() && it->second.version == t.version()) return it->second.cast;
  GradModeGuard record(true);
  // A warm cast (optim/warm_cast.h: written by the last fused optimizer step) holds exactly these values
  // while the weight's version has not moved since; otherwise cast, and ask the next optimizer
  // step to keep this dtype's copy warm.
  // Threads running autocast regions on the same weights share its slot: read and set under the
  // leaf's lock.
  AutogradMeta& meta = *t.impl()->autograd;
  std::shared_ptr<optim::WarmCast> warm;
  {
    std::lock_guard lock(meta.lock);
    warm = optim::warm_cast_of(meta);
    if (!warm || warm->dtype != dtype)
      optim::set_warm_cast(meta, std::make_shared<optim::WarmCast>(optim::WarmCast{dtype, Tensor(), 0}));
  }
  Tensor cast;
  if (warm && warm->dtype == dtype && warm->value.defined() && warm->version == t.version()) {
    cast = to_with_result(t, warm->value);
  } else {
    cast = to(t, t.device(), dtype);
  }
  t_cache.insert_or_assign(key, Entry{t, t.version(), cast});
  return cast;
}

void clear_cast_cache() { t_cache.clear(); }
size_t cast_cache_size() { return t_cache.size(); }

}  // namespace hg::amp
