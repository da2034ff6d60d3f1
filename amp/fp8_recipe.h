// Fp8Recipe: Transformer Engine's delayed scaling (docs/AMP.md, "fp8"). Each tensor an fp8 GEMM
// casts (its input, its weight, its output's gradient) has a column in an amax history; its
// scale comes from that history as it stood at the last update, and its own amax goes into the
// history's current row. The history and the scales are float32 tensors on the GEMMs' device,
// updated with device ops only, so a GPU step never waits for the host (as GradScaler's state).
//
//   amp::Fp8Recipe recipe;                          // HYBRID: E4M3 forward, E5M2 gradients
//   for (...) {
//     { amp::Fp8Autocast fp8(kCPU, recipe); loss = model(x) ...; }   // amp/fp8_autocast.h
//     loss.backward();
//   }
#pragma once

#include <cstdint>
#include <memory>

#include "framework/dtype.h"
#include "framework/tensor.h"
#include "serialize/state_dict.h"

namespace hg::amp {

enum class Fp8Format : uint8_t {
  E4M3,    // every cast E4M3
  Hybrid,  // E4M3 forward (inputs, weights), E5M2 backward (gradients): Transformer Engine's HYBRID
};
enum class AmaxAlgo : uint8_t {
  Max,         // the largest amax in the history window
  MostRecent,  // the amax recorded since the last update
};

// Transformer Engine's DelayedScaling defaults (1.x and 2.x).
struct Fp8RecipeOptions {
  int64_t amax_history_len = 1024;  // >= 1
  int margin = 0;                   // scale = (fp8_max / amax) / 2^margin; >= 0
  Fp8Format format = Fp8Format::Hybrid;
  AmaxAlgo amax_compute_algo = AmaxAlgo::Max;
  // Forward GEMMs on CUDA with cuBLASLt's fast accumulation (Transformer Engine's default for the
  // forward; dgrad and wgrad always promote partial sums). No effect on the CPU emulation.
  bool fast_accum = false;
};

// The tensors of one fp8 GEMM, in its columns' order.
enum class Fp8Role : uint8_t { Input = 0, Weight = 1, GradOutput = 2 };
inline constexpr int64_t kFp8RolesPerGemm = 3;

namespace detail {
struct Fp8RecipeState;
}

// A handle: copies share one state, and an fp8 GEMM's backward keeps it alive.
class Fp8Recipe {
 public:
  explicit Fp8Recipe(Fp8RecipeOptions options = {});

  const Fp8RecipeOptions& options() const;
  Dtype forward_dtype() const { return kFloat8E4M3; }
  Dtype backward_dtype() const;  // E5M2 under Hybrid, E4M3 under E4M3
  Dtype dtype_of(Fp8Role role) const { return role == Fp8Role::GradOutput ? backward_dtype() : forward_dtype(); }

  // How many GEMMs have columns (they are made by the first region that runs each one).
  int64_t gemms() const;
  // [amax_history_len, 3 * gemms()] float32 (row 0: the amaxes recorded since the last update),
  // and the [3 * gemms()] scales and their reciprocals, on the GEMMs' device; undefined before
  // the first fp8 GEMM. Column 3 * gemm + role.
  Tensor amax_history() const;
  Tensor scale() const;
  Tensor scale_inv() const;
  // GEMMs that fell back to bfloat16 (shapes fp8 cannot take), counted on the host.
  int64_t fallbacks() const;

  // Folds the amaxes recorded since the last update into the scales (Transformer Engine's
  // amax_and_scale_update): amax = the history's max (or row 0, MostRecent); where amax is
  // finite and > 0, scale = (fp8_max / amax) / 2^margin, capped at FLT_MAX; else the scale
  // stays; then the history rolls one row (row 0 goes to the end) and row 0 is zeroed. Does
  // nothing when nothing was recorded since the last update. Fp8Autocast calls it on entry.
  void update();

  // amax_history, scale and the options (checked against this recipe's on load).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  // ---- used by the fp8 GEMMs (amp/fp8_autocast.cpp) ----
  std::shared_ptr<detail::Fp8RecipeState> state() const { return state_; }

 private:
  std::shared_ptr<detail::Fp8RecipeState> state_;
};

namespace detail {
struct Fp8RecipeState {
  Fp8RecipeOptions options;
  Tensor history;    // [len, n] float32
  Tensor scale;      // [n] float32
  Tensor scale_inv;  // [n] float32
  Tensor fp8_max;    // [n] float32: 448 or 57344 by column
  bool recorded = false;
  int64_t fallbacks = 0;
  int64_t next_gemm = 0;  // the next GEMM's index in the open region
  int regions_open = 0;
  bool movable = false;  // loaded before any GEMM ran: the first GEMM's device takes the state

  int64_t gemms() const { return scale.defined() ? scale.numel() / kFp8RolesPerGemm : 0; }
  Dtype dtype_of(Fp8Role role) const;
  // Makes columns for GEMMs [0, gemm] on `device` (new ones: history 0, scale 1).
  void ensure(int64_t gemm, Device device);
  // history[0, column] = max(history[0, column], max |t| over t's non-NaN elements); no sync.
  void record_amax(int64_t column, const Tensor& t);
  // history[0, column] as a one-element view, for a kernel that folds an amax into it (the fused
  // cast, amp/fp8_ops.h); marks the step as recorded.
  Tensor amax_slot(int64_t column);
  void update();
};
}  // namespace detail

}  // namespace hg::amp
