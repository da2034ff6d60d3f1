// The fp8 stubs live in the framework so that kernels (which see only the framework) can register
// into them; the ops that run them are in amp/fp8_ops.cpp.
#include "framework/ops/fp8_kernels.h"

namespace hg {

HG_DEFINE_STUB(fp8_cast_transpose_stub, Fp8CastTransposeFn);
HG_DEFINE_OPTIONAL_STUB(fp8_gemm_stub, Fp8GemmFn);
HG_DEFINE_OPTIONAL_STUB(fp8_gemm_supported_stub, Fp8GemmSupportedFn);

}  // namespace hg
