// The fp8 region: the guard, the override that routes linear and mm to the fp8 GEMM, and the fp8
// GEMM itself (a custom autograd function whose backward casts the gradient to E5M2).
#include "amp/fp8_autocast.h"

#include <any>

#include "amp/autocast_hook.h"
#include "amp/fp8_ops.h"
#include "autograd/function.h"
#include "framework/autocast_state.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/matmul.h"
#include "framework/ops/minmax.h"
#include "framework/ops/reduce.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"

namespace hg::amp {

namespace {
// Both only mark their calls in the op recorder: the autograd node is the custom function's.
const OpDef kFp8GemmOp{"fp8_gemm", OpTraits{.differentiable = false}};
const OpDef kFp8FallbackOp{"fp8_fallback", OpTraits{.differentiable = false}};

thread_local const Fp8Autocast* t_fp8_region = nullptr;

int64_t fp8_column(int64_t gemm, Fp8Role role) { return gemm * kFp8RolesPerGemm + static_cast<int64_t>(role); }

// A column's entry of the scales: a [1] view of the tensor update() replaces (never writes), so
// a backward keeps the value its forward used.
Tensor fp8_entry(const Tensor& t, int64_t col) { return t.narrow(0, col, 1); }

template <class T>
T fp8_ctx_data(const autograd::AutogradContext* ctx, const char* key) {
  return std::any_cast<T>(ctx->data.at(key));
}

// An operand in its layout and transposed: the cast's copy where it made one, else a view.
Tensor rows_of(const Fp8Operand& o) { return o.data.defined() ? o.data : o.data_t.t(); }
Tensor cols_of(const Fp8Operand& o) { return o.data_t.defined() ? o.data_t : o.data.t(); }

// x cast with the scale of `column`, its amax folded into the history in the same pass. On the
// device GEMM each operand must be K-major, so the cast makes the layouts its GEMMs read
// (`rowwise`, `columnwise`); the emulation reads transposed views and asks for the copy alone.
Fp8Operand fp8_cast_for(detail::Fp8RecipeState& state, const Tensor& x, int64_t column, Fp8Role role, bool device,
                        bool rowwise, bool columnwise) {
  if (!device) {
    rowwise = true;
    columnwise = false;
  }
  return fp8_cast_transpose(x, fp8_entry(state.scale, column), state.dtype_of(role), state.amax_slot(column),
                            rowwise || !columnwise, columnwise);
}

// a [m, k] . b [n, k]^T times both descales, rounded once to `out`: on the device's fp8 GEMM or
// emulated (amp/fp8_ops.h), which differ only in the order of accumulation.
Tensor fp8_gemm_for(bool device, const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db, Dtype out,
                    bool fast_accum = false) {
  return device ? fp8_gemm(a, b, da, db, out, fast_accum) : fp8_gemm_emulated(a, b, da, db, out);
}

// out = a @ w (mm: w [k, n]) or a @ w^T + bias (linear: w [n, k]), both operands cast with the
// recipe's scales for GEMM `gemm`; bfloat16 out, as the region's other GEMMs. Every GEMM is
// "TN" (both operands K-major): linear's forward x8 . w8^T, dgrad g8 . (w8^T)^T, wgrad
// (g8^T) . (x8^T)^T; mm's forward a8 . (w8^T)^T, dgrad g8 . w8^T, wgrad (a8^T) . (g8^T)^T.
struct Fp8GemmFunction : autograd::Function<Fp8GemmFunction> {
  static constexpr const char* name = "fp8_gemm";

  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& a, const Tensor& w, const Tensor& bias,
                        const std::shared_ptr<detail::Fp8RecipeState>& state, int64_t gemm, bool linear) {
    OpCall call(kFp8GemmOp, {a, w, bias});  // inside it, the ops below neither autocast nor override
    const bool device = fp8_gemm_available(a.device());
    const bool need_a = a.requires_grad(), need_w = w.requires_grad();
    const int64_t k = a.size(-1);
    const Tensor a2 = a.reshape({-1, k});
    const int64_t ca = fp8_column(gemm, Fp8Role::Input), cw = fp8_column(gemm, Fp8Role::Weight);
    const Fp8Operand a8 = fp8_cast_for(*state, a2, ca, Fp8Role::Input, device, true, need_w);
    // linear reads w [n, k] as it is forward and transposed for dgrad; mm the other way round.
    const Fp8Operand w8 = fp8_cast_for(*state, w, cw, Fp8Role::Weight, device, linear || need_a, !linear || need_a);
    const Tensor inv_a = fp8_entry(state->scale_inv, ca), inv_w = fp8_entry(state->scale_inv, cw);
    Tensor out2 = fp8_gemm_for(device, rows_of(a8), linear ? rows_of(w8) : cols_of(w8), inv_a, inv_w, kBFloat16,
                               state->options.fast_accum);
    if (bias.defined()) out2 = out2 + bias.to(kBFloat16);
    Shape shape = a.shape();
    shape.back() = out2.size(1);
    Tensor out = out2.reshape(shape);
    call.finish({&out});
    ctx->data["state"] = state;
    ctx->data["gemm"] = gemm;
    ctx->data["linear"] = linear;
    ctx->data["device"] = device;
    ctx->data["a8"] = a8;
    ctx->data["w8"] = w8;
    ctx->data["inv_a"] = inv_a;
    ctx->data["inv_w"] = inv_w;
    ctx->data["a_shape"] = a.shape();
    ctx->data["a_dtype"] = a.dtype();
    ctx->data["w_dtype"] = w.dtype();
    ctx->data["need_a"] = need_a;
    ctx->data["need_w"] = need_w;
    ctx->data["bias_dtype"] =
        bias.defined() && bias.requires_grad() ? std::optional<Dtype>(bias.dtype()) : std::nullopt;
    return out;
  }

  // The gradient cast to the recipe's backward dtype (E5M2 under Hybrid) with its own scale, and
  // two fp8 GEMMs against the forward's fp8 operands (E5M2 x E4M3: cuBLASLt's table allows it).
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    const auto state = fp8_ctx_data<std::shared_ptr<detail::Fp8RecipeState>>(ctx, "state");
    const auto gemm = fp8_ctx_data<int64_t>(ctx, "gemm");
    const bool linear = fp8_ctx_data<bool>(ctx, "linear");
    const bool device = fp8_ctx_data<bool>(ctx, "device");
    const bool need_a = fp8_ctx_data<bool>(ctx, "need_a"), need_w = fp8_ctx_data<bool>(ctx, "need_w");
    const auto a8 = fp8_ctx_data<Fp8Operand>(ctx, "a8");
    const auto w8 = fp8_ctx_data<Fp8Operand>(ctx, "w8");
    const auto inv_a = fp8_ctx_data<Tensor>(ctx, "inv_a");
    const auto inv_w = fp8_ctx_data<Tensor>(ctx, "inv_w");
    const auto bias_dtype = fp8_ctx_data<std::optional<Dtype>>(ctx, "bias_dtype");
    OpCall call(kFp8GemmOp, {g[0]});
    NoGradGuard no_grad;
    const Tensor g2 = g[0].reshape({-1, g[0].size(-1)});
    const int64_t cg = fp8_column(gemm, Fp8Role::GradOutput);
    const Fp8Operand g8 = fp8_cast_for(*state, g2, cg, Fp8Role::GradOutput, device, need_a, need_w);
    const Tensor inv_g = fp8_entry(state->scale_inv, cg);
    Tensor ga, gw, gb;
    if (need_a) {
      ga = fp8_gemm_for(device, rows_of(g8), linear ? cols_of(w8) : rows_of(w8), inv_g, inv_w,
                        fp8_ctx_data<Dtype>(ctx, "a_dtype"))
               .reshape(fp8_ctx_data<Shape>(ctx, "a_shape"));
    }
    if (need_w) {
      const Dtype wd = fp8_ctx_data<Dtype>(ctx, "w_dtype");
      gw = linear ? fp8_gemm_for(device, cols_of(g8), cols_of(a8), inv_g, inv_a, wd)
                  : fp8_gemm_for(device, cols_of(a8), cols_of(g8), inv_a, inv_g, wd);
    }
    if (bias_dtype) gb = sum(g2.to(kFloat32), std::vector<int64_t>{0}).to(*bias_dtype);
    call.finish({});
    return {ga, gw, gb};
  }
};

// Counts a GEMM an fp8 region could not take and marks it in the op recorder.
void note_fp8_fallback(detail::Fp8RecipeState& state, const TensorList& inputs) {
  ++state.fallbacks;
  OpCall call(kFp8FallbackOp, inputs);
  call.finish({});
}

// linear and mm inside an fp8 region (framework/op.h's override hook): the fp8 GEMM when every
// input is eligible for the region and the three GEMM dimensions are multiples of 16 (each of
// forward, dgrad and wgrad contracts over one of them); otherwise the op runs as usual (bfloat16
// autocast). Malformed calls run as usual too, so the op's own checks report them.
Tensor fp8_override(const OpDef& op, const TensorList& inputs) {
  const Fp8Autocast* region = t_fp8_region;
  if (region == nullptr) return Tensor();
  static const OpDef* const mm_op = find_op("mm");
  static const OpDef* const linear_op = find_op("linear");
  static const OpDef* const mlp_op = find_op("linear_gelu_linear");
  if (&op == mlp_op) {
    // Its two GEMMs as linears (each then an fp8 GEMM or a counted fallback), its GELU between.
    if (!inputs[0].defined() || !region->fp8_on(inputs[0].device().type)) return Tensor();
    return hg::linear(gelu(hg::linear(inputs[0], inputs[1], inputs[2]), true), inputs[3], inputs[4]);
  }
  const bool linear = &op == linear_op;
  if (!linear && &op != mm_op) return Tensor();
  return route_fp8_gemm(*region, linear, inputs);
}

[[maybe_unused]] const bool g_fp8_override_installed = (set_op_override_hook(&fp8_override), true);
}  // namespace

Tensor route_fp8_gemm(const Fp8Autocast& region, bool linear, const TensorList& inputs) {
  if (!region.fp8_on(region.device_)) return Tensor();
  const DeviceType dev = region.device_;
  const Tensor& a = inputs[0];
  const Tensor& w = inputs[1];
  const Tensor bias = linear ? inputs[2] : Tensor();
  if (!is_eligible(a, dev) || !is_eligible(w, dev) || (bias.defined() && !is_eligible(bias, dev))) return Tensor();
  if (a.device() != w.device() || w.dim() != 2 || a.dim() < 1) return Tensor();
  const int64_t k = a.size(-1);
  if (linear ? (w.size(1) != k || (bias.defined() && (bias.dim() != 1 || bias.size(0) != w.size(0))))
             : (a.dim() != 2 || w.size(0) != k))
    return Tensor();
  const int64_t n = linear ? w.size(0) : w.size(1);
  const int64_t m = k > 0 ? a.numel() / k : 0;
  if (m == 0 || n == 0 || k == 0) return Tensor();
  // A GPU without fp8 GEMMs (compute capability below 8.9) runs them in bfloat16 too.
  if (m % 16 != 0 || k % 16 != 0 || n % 16 != 0 || (a.device().is_cuda() && !fp8_gemm_available(a.device()))) {
    note_fp8_fallback(*region.state_, inputs);
    return Tensor();
  }
  const int64_t gemm = region.state_->next_gemm++;
  region.state_->ensure(gemm, a.device());
  return Fp8GemmFunction::apply(a, w, bias, region.state_, gemm, linear);
}

Fp8Autocast::Fp8Autocast(DeviceType device, const Fp8Recipe& recipe, bool enabled)
    : device_(device), state_(enabled ? recipe.state() : nullptr), outer_(t_fp8_region) {
  if (state_) {
    if (state_->regions_open++ == 0) {
      state_->update();  // the amaxes of the last step (forward and backward) into the scales
      state_->next_gemm = 0;
    }
    bf16_.emplace(device, kBFloat16);
  }
  t_fp8_region = this;
}

Fp8Autocast::~Fp8Autocast() {
  t_fp8_region = outer_;
  if (state_) --state_->regions_open;
  bf16_.reset();
}

bool Fp8Autocast::fp8_on(DeviceType device) const {
  return state_ != nullptr && device_ == device && autocast_state()[device].enabled;
}

bool is_fp8_autocast_enabled(DeviceType device) {
  const Fp8Autocast* r = t_fp8_region;
  return r != nullptr && r->fp8_on(device);
}

Tensor fp8_scaled_cast(const Tensor& x, const Tensor& scale, Dtype fp8) {
  HG_CHECK(is_float8(fp8), "fp8_scaled_cast", "expected a float8 dtype to cast to, got {}", fp8);
  HG_CHECK(scale.defined() && scale.numel() == 1 && scale.dtype() == kFloat32 && scale.device() == x.device(),
           "fp8_scaled_cast", "scale must be one float32 value on {}, got {} {} on {}", x.device(),
           scale.defined() ? scale.dtype() : kFloat32, scale.defined() ? scale.shape() : Shape{},
           scale.defined() ? scale.device() : x.device());
  const double limit = fp8 == kFloat8E4M3 ? Float8E4M3::kMax : Float8E5M2::kMax;
  return clamp(x.to(kFloat32) * scale.reshape({}), -limit, limit).to(fp8);
}

}  // namespace hg::amp
