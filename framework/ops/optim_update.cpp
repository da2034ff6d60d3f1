#include "framework/ops/optim_update_kernels.h"

namespace hg::optim {

HG_DEFINE_STUB(sgd_update_stub, SgdUpdateFn);
HG_DEFINE_STUB(adam_update_stub, AdamUpdateFn);

}  // namespace hg::optim
