// The cast cache (docs/AMP.md section 3): inside a region, a weight is cast to the lower dtype
// once and reused, however many ops read it. Per thread, emptied when this thread leaves its
// outermost region, so recomputation and other threads never see another region's casts.
#pragma once

#include <cstddef>

#include "framework/tensor.h"

namespace hg::amp {

// Whether cast_for_autocast(t, dtype) would go through the cache: inside a region whose device
// has cache_enabled, t a float32 leaf that requires grad and owns its whole storage (a weight,
// not a view), and dtype float16/bfloat16.
bool is_cacheable(const Tensor& t, Dtype dtype);

// t cast to dtype on its device; from (and into) the cache when is_cacheable. Cached casts are
// made with grad recording on, so a cast first made under NoGradGuard still links to the weight
// when a later op in the region records a graph (PyTorch issue 112583). A weight written in
// place since it was cached (its version moved) is cast again. Casts made under
// InferenceModeGuard are not cached: they carry no history a later training region could use.
// Across regions: caching a weight's cast marks the weight (WarmCast, optim/warm_cast.h), the
// fused SGD/Adam step then also writes the new weights rounded to that dtype, and the next
// region's first cast of the weight reuses them, bit for bit what casting would give, while the
// weight has not been written since (its version). One such copy per weight stays alive between
// steps.
Tensor cast_for_autocast(const Tensor& t, Dtype dtype);

void clear_cast_cache();   // this thread's cache; called when the nesting depth returns to 0
size_t cast_cache_size();  // entries in this thread's cache

}  // namespace hg::amp
