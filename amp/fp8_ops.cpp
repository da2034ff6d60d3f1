#include "amp/fp8_ops.h"

#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/fp8_kernels.h"
#include "framework/ops/matmul.h"
#include "framework/ops/views.h"

namespace hg::amp {

namespace {
const OpDef kFp8CastTransposeOp{"fp8_cast_transpose", OpTraits{.differentiable = false}};
const OpDef kFp8GemmTnOp{"fp8_gemm_tn", OpTraits{.differentiable = false}};

void check_scalar(const Tensor& t, Device device, const char* what, const char* op) {
  HG_CHECK(t.defined() && t.numel() == 1 && t.dtype() == kFloat32 && t.device() == device, op,
           "{} must be one float32 value on {}, got {}", what, device,
           t.defined() ? fmt::format("{} {} on {}", t.dtype(), t.shape(), t.device()) : std::string("undefined"));
}

void check_gemm_args(const Tensor& a, const Tensor& b, const Tensor& a_descale, const Tensor& b_descale, Dtype out,
                     const char* op) {
  HG_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), op,
           "expected a [m, k] and b [n, k], got {} and {}", a.defined() ? a.shape() : Shape{},
           b.defined() ? b.shape() : Shape{});
  HG_CHECK(is_float8(a.dtype()) && is_float8(b.dtype()) && !(a.dtype() == kFloat8E5M2 && b.dtype() == kFloat8E5M2), op,
           "expected fp8 operands, not both E5M2, got {} and {}", a.dtype(), b.dtype());
  HG_CHECK(a.device() == b.device(), op, "expected operands on one device, got {} and {}", a.device(), b.device());
  HG_CHECK(out == kFloat32 || out == kBFloat16 || out == kFloat16, op,
           "the output must be float32, bfloat16 or float16, got {}", out);
  check_scalar(a_descale, a.device(), "a_descale", op);
  check_scalar(b_descale, a.device(), "b_descale", op);
}
}  // namespace

Fp8Operand fp8_cast_transpose(const Tensor& x_in, const Tensor& scale, Dtype fp8, const Tensor& amax, bool rowwise,
                              bool columnwise) {
  constexpr const char* kOp = "fp8_cast_transpose";
  HG_CHECK(x_in.defined() && x_in.dim() == 2, kOp, "expected a 2-d tensor, got {}",
           x_in.defined() ? x_in.shape() : Shape{});
  HG_CHECK(is_floating(x_in.dtype()), kOp, "expected a floating-point tensor, got {}", x_in.dtype());
  HG_CHECK(is_float8(fp8), kOp, "expected a float8 dtype to cast to, got {}", fp8);
  HG_CHECK(rowwise || columnwise, kOp, "asked for neither the copy nor its transpose");
  check_scalar(scale, x_in.device(), "scale", kOp);
  check_scalar(amax, x_in.device(), "amax", kOp);
  OpCall call(kFp8CastTransposeOp, {x_in, scale, amax});
  NoGradGuard no_grad;
  const Dtype xd = x_in.dtype();
  Tensor x = (xd == kFloat32 || xd == kBFloat16 || xd == kFloat16) ? x_in.detach() : x_in.detach().to(kFloat32);
  x = x.contiguous();
  const TensorOptions opts = TensorOptions(fp8).device(x.device());
  Fp8Operand r;
  if (rowwise) r.data = empty(x.shape(), opts);
  if (columnwise) r.data_t = empty({x.size(1), x.size(0)}, opts);
  fp8_cast_transpose_stub(x.device().type, x, scale, r.data, r.data_t, amax);
  amax.bump_version();
  std::vector<Tensor*> outs;
  if (r.data.defined()) outs.push_back(&r.data);
  if (r.data_t.defined()) outs.push_back(&r.data_t);
  call.finish(outs);
  return r;
}

bool fp8_gemm_available(Device device) {
  return device.is_cuda() && fp8_gemm_stub.has(device.type) && fp8_gemm_supported_stub.has(device.type) &&
         fp8_gemm_supported_stub(device.type, device.index);
}

Tensor fp8_gemm_emulated(const Tensor& a, const Tensor& b, const Tensor& a_descale, const Tensor& b_descale,
                         Dtype out) {
  check_gemm_args(a, b, a_descale, b_descale, out, "fp8_gemm_emulated");
  NoGradGuard no_grad;
  // The descales multiplied first, then the float32 sums (a.to and b.to are exact).
  return (mm(a.to(kFloat32), b.to(kFloat32).t()) * (a_descale.reshape({1}) * b_descale.reshape({1}))).to(out);
}

Tensor fp8_gemm(const Tensor& a, const Tensor& b, const Tensor& a_descale, const Tensor& b_descale, Dtype out,
                bool fast_accum) {
  check_gemm_args(a, b, a_descale, b_descale, out, "fp8_gemm");
  if (!a.device().is_cuda()) return fp8_gemm_emulated(a, b, a_descale, b_descale, out);
  HG_CHECK(fp8_gemm_available(a.device()), "fp8_gemm",
           "{} has no fp8 GEMM (it needs compute capability 8.9 or later); fp8_gemm_emulated runs anywhere",
           a.device());
  OpCall call(kFp8GemmTnOp, {a, b, a_descale, b_descale});
  Fp8GemmArgs args;
  args.a = a.contiguous();
  args.b = b.contiguous();
  args.a_scale = a_descale.contiguous();
  args.b_scale = b_descale.contiguous();
  args.out = empty({a.size(0), b.size(0)}, TensorOptions(out).device(a.device()));
  args.fast_accum = fast_accum;
  fp8_gemm_stub(a.device().type, args);
  call.finish({&args.out});
  return args.out;
}

}  // namespace hg::amp
