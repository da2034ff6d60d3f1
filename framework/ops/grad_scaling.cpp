// The GradScaler stubs live in the framework so that kernels (which see only the framework)
// can register into them; the ops that run them are in amp/scaler_ops.cpp.
#include "framework/ops/grad_scaling_kernels.h"

namespace hg {

HG_DEFINE_STUB(unscale_grad_stub, UnscaleGradFn);
HG_DEFINE_OPTIONAL_STUB(find_non_finite_stub, FindNonFiniteFn);
HG_DEFINE_STUB(update_scale_stub, UpdateScaleFn);

}  // namespace hg
