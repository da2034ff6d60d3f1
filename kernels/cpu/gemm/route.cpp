#include "kernels/cpu/gemm/route.h"

#include <array>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "framework/error.h"
#include "kernels/common/blas_layout.h"
#include "kernels/cpu/gemm/packed.h"

namespace hg::cpu {
namespace {

constexpr const GemmThresholds& kT = kGemmThresholds;

constexpr std::array<std::pair<GemmPath, std::string_view>, 8> kNames{{
    {GemmPath::Narrow, "narrow"},
    {GemmPath::NarrowTransposed, "narrow_transposed"},
    {GemmPath::ShortInner, "short_inner"},
    {GemmPath::OneDnn, "onednn"},
    {GemmPath::Packed, "packed"},
    {GemmPath::Widening, "widening"},
    {GemmPath::Blas, "blas"},
    {GemmPath::DenseBlas, "dense_blas"},
}};

bool is_16bit(Dtype d) { return d == kFloat16 || d == kBFloat16; }

bool layouts_usable(const GemmProblem& p) {
  return blas_layout(p.m, p.k, p.sa_row, p.sa_col).usable && blas_layout(p.k, p.n, p.sb_row, p.sb_col).usable;
}

// Few rows of a, b stored by rows (W read as W in g @ W) or by columns (W^T in x @ W^T), and a
// b large enough that reading it in place beats packing it.
bool narrow_fits(int64_t m, int64_t k, int64_t n, int64_t sb_row, int64_t sb_col, bool widens) {
  return m > 0 && m <= kT.narrow_rows && n >= kT.narrow_min_cols && k >= kT.narrow_min_depth &&
         k * n >= (widens ? kT.narrow_min_weights_widened : kT.narrow_min_weights) && (sb_col == 1 || sb_row == 1);
}

// The mirror: a large a stored by rows against at most narrow_rows columns of b, computed as
// out^T = b^T @ a^T; where the product would otherwise be widened, and for float32's x @ W^T
// with very few columns.
bool narrow_transposed_fits(const GemmProblem& p, bool widens) {
  const bool float_dots = p.dtype == kFloat32 && p.n <= kT.narrow_float_cols && p.k >= kT.narrow_float_min_depth;
  return (widens || float_dots) && p.sa_col == 1 && narrow_fits(p.n, p.k, p.m, 1, 2, true);
}

bool short_inner_fits(const GemmProblem& p) {
  return is_16bit(p.dtype) && p.k > 0 && p.k <= kT.short_inner_depth && p.m * p.n >= kT.short_inner_min_outputs;
}

bool onednn_takes_dtype(Dtype d, const CpuCaps& caps) {
  return caps.onednn && (d == kFloat32 || (d == kBFloat16 && caps.native_bf16()));
}

GemmPath widening_path(const CpuCaps& caps) {
  return kPackedGemmBuilt && caps.avx512 ? GemmPath::Packed : GemmPath::Widening;
}

GemmPath usual_route(const GemmProblem& p, const CpuCaps& caps) {
  const Dtype d = p.dtype;
  if (p.caller == GemmCaller::Kernel) {
    const bool onednn = d == kFloat32 && caps.onednn && p.m * p.k * p.n >= kT.onednn_min_work;
    return onednn ? GemmPath::OneDnn : GemmPath::Blas;
  }
  // A widened weight gradient at a small batch writes its float32 result in one pass there.
  if (p.caller == GemmCaller::Widened && short_inner_fits(p)) return GemmPath::ShortInner;
  const bool widens = product_widens(d, caps);
  if (d != kFloat64) {
    if (narrow_fits(p.m, p.k, p.n, p.sb_row, p.sb_col, widens)) return GemmPath::Narrow;
    if (narrow_transposed_fits(p, widens)) return GemmPath::NarrowTransposed;
  }
  if (short_inner_fits(p)) return GemmPath::ShortInner;
  if (onednn_takes_dtype(d, caps) && p.m > 0 && p.n > 0 && !p.accumulate && layouts_usable(p) &&
      p.m * p.k * p.n >= kT.onednn_min_work)
    return GemmPath::OneDnn;
  if (d == kFloat64 || (d == kFloat32 && layouts_usable(p))) return GemmPath::Blas;
  if (d == kFloat32) return GemmPath::DenseBlas;
  return widening_path(caps);
}

}  // namespace

bool product_widens(Dtype dtype, const CpuCaps& caps) {
  return dtype == kFloat16 || (dtype == kBFloat16 && !onednn_takes_dtype(kBFloat16, caps));
}

bool path_can_take(GemmPath path, const GemmProblem& p, const CpuCaps& caps) {
  const Dtype d = p.dtype;
  const bool op = p.caller != GemmCaller::Kernel;  // the in-register and 16-bit paths serve ops only
  switch (path) {
    case GemmPath::Narrow:
      return op && d != kFloat64 && p.m > 0 && p.m <= kT.narrow_rows && p.k > 0 && (p.sb_col == 1 || p.sb_row == 1);
    case GemmPath::NarrowTransposed:
      return op && d != kFloat64 && p.n > 0 && p.n <= kT.narrow_rows && p.k > 0 && p.sa_col == 1;
    case GemmPath::ShortInner: return op && is_16bit(d) && p.k > 0 && p.k <= kT.short_inner_depth;
    case GemmPath::OneDnn: return onednn_takes_dtype(d, caps) && (d == kFloat32 || !p.accumulate) && layouts_usable(p);
    case GemmPath::Packed: return op && is_16bit(d) && kPackedGemmBuilt && caps.avx512;
    case GemmPath::Widening: return op && is_16bit(d);
    case GemmPath::Blas: return d == kFloat64 || (d == kFloat32 && (!op || layouts_usable(p)));
    case GemmPath::DenseBlas: return op && d == kFloat32;
  }
  return false;
}

GemmPath route(const GemmProblem& p, const CpuCaps& caps, std::optional<GemmPath> forced) {
  if (forced && path_can_take(*forced, p, caps)) return *forced;
  return usual_route(p, caps);
}

GemmPath route(const GemmProblem& p) { return route(p, cpu_caps(), forced_gemm_path()); }

GemmPath onednn_fallback(const GemmProblem& p, const CpuCaps& caps) {
  return is_16bit(p.dtype) ? widening_path(caps) : GemmPath::Blas;
}

std::string_view path_name(GemmPath path) {
  for (const auto& [p, name] : kNames)
    if (p == path) return name;
  return "?";
}

GemmPath parse_gemm_path(std::string_view s) {
  std::string valid;
  for (const auto& [p, name] : kNames) {
    if (name == s) return p;
    valid += valid.empty() ? "" : ", ";
    valid += name;
  }
  fail("mm", "HG_CPU_GEMM='{}' names no CPU product path; valid names: {} (or unset for the usual route)", s, valid);
}

std::optional<GemmPath> forced_gemm_path() {
  static const std::optional<GemmPath> forced = []() -> std::optional<GemmPath> {
    const char* env = std::getenv("HG_CPU_GEMM");
    if (env == nullptr || *env == '\0') return std::nullopt;
    return parse_gemm_path(env);
  }();
  return forced;
}

std::string describe_routes(const CpuCaps& caps, std::optional<GemmPath> forced) {
  // Representative products: a square one, a linear layer's x @ W^T at batch 16 against a
  // 4096 x 4096 weight, a classifier's last layer (10 outputs, 512 inputs) at batch 128, and a
  // weight gradient g^T x at batch 16 (k = 16).
  const auto path = [&](Dtype d, GemmProblem p) {
    p.dtype = d;
    return path_name(route(p, caps, forced));
  };
  const GemmProblem square{1024, 1024, 1024, 1024, 1, 1024, 1};
  const GemmProblem small_batch{16, 4096, 4096, 4096, 1, 1, 4096};
  const GemmProblem few_outputs{128, 512, 10, 512, 1, 1, 512};
  const GemmProblem weight_grad{512, 16, 784, 1, 512, 784, 1};
  std::string s =
      fmt::format("CPU products ({}{}): square / x @ W^T batch 16 / 10 outputs / weight grad batch 16:", describe(caps),
                  forced ? fmt::format(", HG_CPU_GEMM={}", path_name(*forced)) : "");
  for (const Dtype d : {kFloat32, kBFloat16, kFloat16}) {
    s += fmt::format(" {} {}/{}/{}/{};", dtype_name(d), path(d, square), path(d, small_batch), path(d, few_outputs),
                     path(d, weight_grad));
  }
  s.pop_back();
  return s;
}

}  // namespace hg::cpu
