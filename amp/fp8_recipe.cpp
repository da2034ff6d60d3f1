#include "amp/fp8_recipe.h"

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "framework/grad_mode.h"
#include "framework/ops/binary.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/minmax.h"
#include "framework/ops/unary.h"
#include "framework/ops/views.h"
#include "serialize/state_value.h"

namespace hg::amp {

namespace {
constexpr const char* kFp8RecipeName = "Fp8Recipe";

void check_fp8_options(const Fp8RecipeOptions& o) {
  HG_CHECK(o.amax_history_len >= 1 && o.amax_history_len <= (int64_t{1} << 20), kFp8RecipeName,
           "amax_history_len must be in [1, 2^20], got {}", o.amax_history_len);
  HG_CHECK(o.margin >= 0 && o.margin <= 64, kFp8RecipeName, "margin must be in [0, 64], got {}", o.margin);
}

float fp8_max_of(Dtype d) { return d == kFloat8E4M3 ? Float8E4M3::kMax : Float8E5M2::kMax; }
}  // namespace

namespace detail {

Dtype Fp8RecipeState::dtype_of(Fp8Role role) const {
  return role == Fp8Role::GradOutput && options.format == Fp8Format::Hybrid ? kFloat8E5M2 : kFloat8E4M3;
}

void Fp8RecipeState::ensure(int64_t gemm, Device device) {
  NoGradGuard no_grad;
  if (scale.defined() && scale.device() != device) {
    HG_CHECK(movable, kFp8RecipeName,
             "this recipe's scaling state is on {} but an fp8 GEMM's inputs are on {}; use one recipe per device",
             scale.device(), device);
    history = history.to(device);
    scale = scale.to(device);
    scale_inv = scale_inv.to(device);
    fp8_max = fp8_max.to(device);
  }
  movable = false;
  const int64_t have = gemms();
  if (gemm < have) return;
  const int64_t add = (gemm + 1 - have) * kFp8RolesPerGemm;
  const TensorOptions opts = TensorOptions(kFloat32).device(device);
  std::vector<float> maxes;
  for (int64_t g = have; g <= gemm; ++g)
    for (Fp8Role r : {Fp8Role::Input, Fp8Role::Weight, Fp8Role::GradOutput}) maxes.push_back(fp8_max_of(dtype_of(r)));
  Tensor new_history = zeros({options.amax_history_len, add}, opts);
  Tensor new_scale = ones({add}, opts);
  Tensor new_max = tensor(maxes).to(device);
  if (have == 0) {
    history = new_history;
    scale = new_scale;
    scale_inv = ones({add}, opts);
    fp8_max = new_max;
  } else {
    history = cat({history, new_history}, 1);
    scale = cat({scale, new_scale}, 0);
    scale_inv = cat({scale_inv, ones({add}, opts)}, 0);
    fp8_max = cat({fp8_max, new_max}, 0);
  }
}

void Fp8RecipeState::record_amax(int64_t column, const Tensor& t) {
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  // NaN elements skipped, as Transformer Engine's amax (an fmaxf reduction) skips them.
  const Tensor ax = abs(t.detach());
  const Tensor a = max(where(ne(ax, ax), zeros_like(ax), ax)).to(kFloat32).reshape({1});
  Tensor cell = history.select(0, 0).narrow(0, column, 1);
  cell.copy_(maximum(cell, a));
  recorded = true;
}

Tensor Fp8RecipeState::amax_slot(int64_t column) {
  recorded = true;
  return history.select(0, 0).narrow(0, column, 1);
}

void Fp8RecipeState::update() {
  if (!recorded || !history.defined()) return;
  NoGradGuard no_grad;
  const int64_t len = history.size(0);
  const Tensor amax = options.amax_compute_algo == AmaxAlgo::Max ? max(history, 0).first : history.select(0, 0);
  const Tensor candidate = div(fp8_max, amax) * std::ldexp(1.0, -options.margin);
  // Where amax is 0 or not finite the scale stays (NaN never gets here: record_amax drops it).
  const Tensor finite = where(amax < static_cast<double>(INFINITY), candidate, scale);
  const Tensor s = clamp(where(amax > 0.0, finite, scale), std::nullopt, static_cast<double>(FLT_MAX));
  const Tensor zero_row = zeros({1, history.size(1)}, TensorOptions(kFloat32).device(history.device()));
  Tensor rolled;
  if (len == 1) {
    rolled = zero_row;
  } else if (len == 2) {
    rolled = cat({zero_row, history.narrow(0, 0, 1)}, 0);
  } else {
    rolled = cat({zero_row, history.narrow(0, 2, len - 2), history.narrow(0, 0, 1)}, 0);
  }
  // New tensors, not writes into the old ones: a backward still to run keeps the scales its
  // forward cast with.
  scale = s;
  scale_inv = reciprocal(s);
  history = rolled;
  recorded = false;
}

}  // namespace detail

Fp8Recipe::Fp8Recipe(Fp8RecipeOptions options) : state_(std::make_shared<detail::Fp8RecipeState>()) {
  check_fp8_options(options);
  state_->options = options;
}

const Fp8RecipeOptions& Fp8Recipe::options() const { return state_->options; }
Dtype Fp8Recipe::backward_dtype() const { return state_->dtype_of(Fp8Role::GradOutput); }
int64_t Fp8Recipe::gemms() const { return state_->gemms(); }
Tensor Fp8Recipe::amax_history() const { return state_->history; }
Tensor Fp8Recipe::scale() const { return state_->scale; }
Tensor Fp8Recipe::scale_inv() const { return state_->scale_inv; }
int64_t Fp8Recipe::fallbacks() const { return state_->fallbacks; }
void Fp8Recipe::update() { state_->update(); }

StateDict Fp8Recipe::state_dict() const {
  const Fp8RecipeOptions& o = state_->options;
  StateDict sd{
      {"amax_history_len", scalar_tensor(static_cast<double>(o.amax_history_len), kInt64)},
      {"margin", scalar_tensor(o.margin, kInt64)},
      {"format", scalar_tensor(o.format == Fp8Format::Hybrid ? 1.0 : 0.0, kInt64)},
      {"amax_compute_algo", scalar_tensor(o.amax_compute_algo == AmaxAlgo::MostRecent ? 1.0 : 0.0, kInt64)},
  };
  if (state_->history.defined()) {
    NoGradGuard no_grad;
    sd["amax_history"] = state_->history.clone();
    sd["scale"] = state_->scale.clone();
  }
  return sd;
}

void Fp8Recipe::load_state_dict(const StateDict& state) {
  static constexpr const char* kKeys[] = {"amax_history_len",  "margin",       "format",
                                          "amax_compute_algo", "amax_history", "scale"};
  for (const auto& entry : state) {
    bool known = false;
    for (const char* k : kKeys) known = known || entry.first == k;
    HG_CHECK(known, kFp8RecipeName, "load_state_dict(): unexpected key '{}'", entry.first);
  }
  auto get = [&](const char* key) -> const Tensor& {
    auto it = state.find(key);
    HG_CHECK(it != state.end(), kFp8RecipeName, "load_state_dict(): missing key '{}'", key);
    return it->second;
  };
  const Fp8RecipeOptions& o = state_->options;
  const int64_t len = state_count(get("amax_history_len"), kFp8RecipeName, "amax_history_len", 1, int64_t{1} << 20);
  const int64_t margin = state_count(get("margin"), kFp8RecipeName, "margin", 0, 64);
  const int64_t format = state_count(get("format"), kFp8RecipeName, "format", 0, 1);
  const int64_t algo = state_count(get("amax_compute_algo"), kFp8RecipeName, "amax_compute_algo", 0, 1);
  HG_CHECK(len == o.amax_history_len && margin == o.margin && (format == 1) == (o.format == Fp8Format::Hybrid) &&
               (algo == 1) == (o.amax_compute_algo == AmaxAlgo::MostRecent),
           kFp8RecipeName,
           "load_state_dict(): the checkpoint's recipe (amax_history_len {}, margin {}, format {}, amax_compute_algo "
           "{}) differs from this one's (amax_history_len {}, margin {}); make the recipe with the same options",
           len, margin, format == 1 ? "hybrid" : "e4m3", algo == 1 ? "most_recent" : "max", o.amax_history_len,
           o.margin);
  const bool has_history = state.count("amax_history") != 0;
  HG_CHECK(has_history == (state.count("scale") != 0), kFp8RecipeName,
           "load_state_dict(): 'amax_history' and 'scale' come together");
  if (!has_history) return;
  NoGradGuard no_grad;
  const Tensor history = get("amax_history").to(kFloat32);
  const Tensor scale = get("scale").to(kFloat32);
  HG_CHECK(
      history.dim() == 2 && history.size(0) == len && history.size(1) % kFp8RolesPerGemm == 0 && history.size(1) > 0,
      kFp8RecipeName, "load_state_dict(): 'amax_history' must have shape [{}, 3 * gemms], got {}", len,
      history.shape());
  HG_CHECK(scale.dim() == 1 && scale.size(0) == history.size(1), kFp8RecipeName,
           "load_state_dict(): 'scale' must have shape [{}], got {}", history.size(1), scale.shape());
  // Untrusted input: every scale finite and > 0, every amax finite and >= 0.
  for (float v : scale.to_vector<float>())
    HG_CHECK(std::isfinite(v) && v > 0, kFp8RecipeName,
             "load_state_dict(): 'scale' must hold finite values > 0, got {}", v);
  bool row0_recorded = false;
  const std::vector<float> amaxes = history.to_vector<float>();
  for (size_t i = 0; i < amaxes.size(); ++i) {
    HG_CHECK(std::isfinite(amaxes[i]) && amaxes[i] >= 0, kFp8RecipeName,
             "load_state_dict(): 'amax_history' must hold finite values >= 0, got {}", amaxes[i]);
    row0_recorded = row0_recorded || (i < static_cast<size_t>(history.size(1)) && amaxes[i] > 0);
  }
  detail::Fp8RecipeState& s = *state_;
  const bool had_state = s.scale.defined();
  const Device device = s.scale.defined() ? s.scale.device() : history.device();
  const int64_t gemms = history.size(1) / kFp8RolesPerGemm;
  s.history = Tensor();
  s.scale = Tensor();
  s.ensure(gemms - 1, device);  // fresh columns with the right maxima, then the loaded values
  s.history.copy_(history);
  s.scale.copy_(scale);
  s.scale_inv = reciprocal(s.scale);
  s.recorded = row0_recorded;
  s.movable = !had_state;  // loaded before any GEMM ran: the first GEMM's device takes it
}

}  // namespace hg::amp
