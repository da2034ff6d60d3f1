// The fp8 region: the guard, the override that routes linear and mm to the fp8 GEMM, and the fp8
// GEMM itself (a custom autograd function whose backward casts the gradient to E5M2).
#include "amp/fp8_autocast.h"

#include <any>

#include "amp/autocast_hook.h"
#include "autograd/function.h"
#include "framework/autocast_state.h"
#include "framework/grad_mode.h"
#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/copy.h"
#include "framework/ops/matmul.h"
#include "framework/ops/minmax.h"
#include "framework/ops/reduce.h"
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

// a8 [m, k] @ b8 [k, n], fp8 operands widened to float32 (exact) and multiplied with float32
// accumulation, times `descale` (the two operands' 1/scale), rounded once to `out`.
Tensor fp8_widened_gemm(const Tensor& a8, const Tensor& b8, const Tensor& descale, Dtype out) {
  return (mm(a8.to(kFloat32), b8.to(kFloat32)) * descale).to(out);
}

template <class T>
T fp8_ctx_data(const autograd::AutogradContext* ctx, const char* key) {
  return std::any_cast<T>(ctx->data.at(key));
}

// out = a @ w (mm: w [k, n]) or a @ w^T + bias (linear: w [n, k]), both operands cast with the
// recipe's scales for GEMM `gemm`; bfloat16 out, as the region's other GEMMs.
struct Fp8GemmFunction : autograd::Function<Fp8GemmFunction> {
  static constexpr const char* name = "fp8_gemm";

  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& a, const Tensor& w, const Tensor& bias,
                        const std::shared_ptr<detail::Fp8RecipeState>& state, int64_t gemm, bool linear) {
    OpCall call(kFp8GemmOp, {a, w, bias});  // inside it, the ops below neither autocast nor override
    const int64_t k = a.size(-1);
    const Tensor a2 = a.reshape({-1, k});
    const int64_t ca = fp8_column(gemm, Fp8Role::Input), cw = fp8_column(gemm, Fp8Role::Weight);
    state->record_amax(ca, a2);
    state->record_amax(cw, w);
    const Tensor a8 = fp8_scaled_cast(a2, fp8_entry(state->scale, ca), state->dtype_of(Fp8Role::Input));
    const Tensor w8 = fp8_scaled_cast(w, fp8_entry(state->scale, cw), state->dtype_of(Fp8Role::Weight));
    const Tensor inv_a = fp8_entry(state->scale_inv, ca), inv_w = fp8_entry(state->scale_inv, cw);
    Tensor out2 = fp8_widened_gemm(a8, linear ? w8.t() : w8, inv_a * inv_w, kBFloat16);
    if (bias.defined()) out2 = out2 + bias.to(kBFloat16);
    Shape shape = a.shape();
    shape.back() = out2.size(1);
    Tensor out = out2.reshape(shape);
    call.finish({&out});
    ctx->data["state"] = state;
    ctx->data["gemm"] = gemm;
    ctx->data["linear"] = linear;
    ctx->data["a8"] = a8;
    ctx->data["w8"] = w8;
    ctx->data["inv_a"] = inv_a;
    ctx->data["inv_w"] = inv_w;
    ctx->data["a_shape"] = a.shape();
    ctx->data["a_dtype"] = a.dtype();
    ctx->data["w_dtype"] = w.dtype();
    ctx->data["need_a"] = a.requires_grad();
    ctx->data["need_w"] = w.requires_grad();
    ctx->data["bias_dtype"] =
        bias.defined() && bias.requires_grad() ? std::optional<Dtype>(bias.dtype()) : std::nullopt;
    return out;
  }

  // The gradient cast to the recipe's backward dtype (E5M2 under Hybrid) with its own scale, and
  // two fp8 GEMMs against the forward's fp8 operands: dgrad g8 @ w8, wgrad g8^T @ a8.
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    const auto state = fp8_ctx_data<std::shared_ptr<detail::Fp8RecipeState>>(ctx, "state");
    const auto gemm = fp8_ctx_data<int64_t>(ctx, "gemm");
    const bool linear = fp8_ctx_data<bool>(ctx, "linear");
    const auto a8 = fp8_ctx_data<Tensor>(ctx, "a8");
    const auto w8 = fp8_ctx_data<Tensor>(ctx, "w8");
    const auto inv_a = fp8_ctx_data<Tensor>(ctx, "inv_a");
    const auto inv_w = fp8_ctx_data<Tensor>(ctx, "inv_w");
    const auto bias_dtype = fp8_ctx_data<std::optional<Dtype>>(ctx, "bias_dtype");
    OpCall call(kFp8GemmOp, {g[0]});
    NoGradGuard no_grad;
    const Tensor g2 = g[0].reshape({-1, g[0].size(-1)});
    const int64_t cg = fp8_column(gemm, Fp8Role::GradOutput);
    state->record_amax(cg, g2);
    const Tensor g8 = fp8_scaled_cast(g2, fp8_entry(state->scale, cg), state->dtype_of(Fp8Role::GradOutput));
    const Tensor inv_g = fp8_entry(state->scale_inv, cg);
    Tensor ga, gw, gb;
    if (fp8_ctx_data<bool>(ctx, "need_a")) {
      ga = fp8_widened_gemm(g8, linear ? w8 : w8.t(), inv_g * inv_w, fp8_ctx_data<Dtype>(ctx, "a_dtype"))
               .reshape(fp8_ctx_data<Shape>(ctx, "a_shape"));
    }
    if (fp8_ctx_data<bool>(ctx, "need_w")) {
      const Dtype wd = fp8_ctx_data<Dtype>(ctx, "w_dtype");
      gw = linear ? fp8_widened_gemm(g8.t(), a8, inv_g * inv_a, wd) : fp8_widened_gemm(a8.t(), g8, inv_a * inv_g, wd);
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
  if (m % 16 != 0 || k % 16 != 0 || n % 16 != 0) {
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
