// The CPU product router (kernels/cpu/gemm/route.h): the path of typical products on each kind of
// CPU these machines come in, with the capabilities passed in (not this machine's), what
// HG_CPU_GEMM may force, and its bad values.
#include <string>
#include <vector>

#include "helpers.h"
#include "kernels/cpu/gemm/packed.h"
#include "kernels/cpu/gemm/route.h"

using namespace hg;
using cpu::CpuCaps;
using cpu::GemmCaller;
using cpu::GemmPath;
using cpu::GemmProblem;

namespace {

// The three CPU kinds, plus an AVX2-only one and oneDNN turned off.
constexpr CpuCaps kZen4{.avx2 = true, .avx512 = true, .avx512_bf16 = true, .onednn = true, .threads = 2};
constexpr CpuCaps kAmx{.avx2 = true, .avx512 = true, .avx512_bf16 = true, .amx = true, .onednn = true, .threads = 2};
constexpr CpuCaps kIntelNoBf16{.avx2 = true, .avx512 = true, .onednn = true, .threads = 2};
constexpr CpuCaps kAvx2{.avx2 = true, .onednn = true, .threads = 2};
constexpr CpuCaps kZen4OneDnnOff{.avx2 = true, .avx512 = true, .avx512_bf16 = true, .native_off = true, .threads = 2};

// 16-bit products widened while packed where AVX-512 is built in, else a panel at a time.
constexpr GemmPath kPackedHere = cpu::kPackedGemmBuilt ? GemmPath::Packed : GemmPath::Widening;

// [m, k] @ [k, n] with both operands row-major, and the shapes a network's layers make.
GemmProblem dense(int64_t m, int64_t k, int64_t n, Dtype d, GemmCaller c = GemmCaller::Product) {
  return {m, k, n, k, 1, n, 1, d, c};
}
// x [batch, in] @ W^T for a weight W [out, in]: b stored by columns.
GemmProblem x_wt(int64_t batch, int64_t in, int64_t out, Dtype d) { return {batch, in, out, in, 1, 1, in, d}; }
// A weight gradient g^T @ x: g [batch, out] read transposed, x [batch, in] by rows.
GemmProblem weight_grad(int64_t batch, int64_t out, int64_t in, Dtype d, GemmCaller c = GemmCaller::Product) {
  return {out, batch, in, 1, out, in, 1, d, c};
}

struct Row {
  const char* what;
  GemmProblem problem;
  CpuCaps caps;
  GemmPath expected;
};

}  // namespace

TEST_CASE("route: the path of typical products on each kind of CPU") {
  const std::vector<Row> table = {
      {"f32 square, oneDNN", dense(1024, 1024, 1024, kFloat32), kZen4, GemmPath::OneDnn},
      {"f32 square, no AVX-512", dense(1024, 1024, 1024, kFloat32), kAvx2, GemmPath::OneDnn},
      {"f32 square, oneDNN off", dense(1024, 1024, 1024, kFloat32), kZen4OneDnnOff, GemmPath::Blas},
      {"f32 tiny, below oneDNN's bookkeeping", dense(8, 8, 8, kFloat32), kZen4, GemmPath::Blas},
      {"f32 x @ W^T batch 16 against 4096 x 4096", x_wt(16, 4096, 4096, kFloat32), kZen4, GemmPath::Narrow},
      {"f32 g @ W batch 16 against 4096 x 4096", dense(16, 4096, 4096, kFloat32), kAmx, GemmPath::Narrow},
      {"f32 17 rows: too many for narrow", x_wt(17, 4096, 4096, kFloat32), kZen4, GemmPath::OneDnn},
      {"f32 batch 16 against 784 x 128: weight too small", x_wt(16, 784, 128, kFloat32), kZen4, GemmPath::OneDnn},
      {"f32 classifier 10 outputs, k 512", x_wt(128, 512, 10, kFloat32), kZen4, GemmPath::NarrowTransposed},
      {"f32 classifier 10 outputs, k 256", x_wt(128, 256, 10, kFloat32), kZen4, GemmPath::OneDnn},
      {"f32 classifier 13 outputs", x_wt(128, 784, 13, kFloat32), kZen4, GemmPath::OneDnn},
      {"f32 a strided both ways", {300, 300, 300, 600, 2, 300, 1, kFloat32}, kZen4, GemmPath::DenseBlas},
      {"f64 square", dense(1024, 1024, 1024, kFloat64), kZen4, GemmPath::Blas},
      {"f64 batch 16: no narrow kernel", x_wt(16, 4096, 4096, kFloat64), kZen4, GemmPath::Blas},
      {"bf16 square, bf16 units", dense(1024, 1024, 1024, kBFloat16), kZen4, GemmPath::OneDnn},
      {"bf16 square, AMX", dense(1024, 1024, 1024, kBFloat16), kAmx, GemmPath::OneDnn},
      {"bf16 square, no bf16 units", dense(1024, 1024, 1024, kBFloat16), kIntelNoBf16, kPackedHere},
      {"bf16 square, AVX2 only", dense(1024, 1024, 1024, kBFloat16), kAvx2, GemmPath::Widening},
      {"bf16 square, oneDNN off", dense(1024, 1024, 1024, kBFloat16), kZen4OneDnnOff, kPackedHere},
      {"bf16 MLP layer batch 16, bf16 units", x_wt(16, 784, 128, kBFloat16), kZen4, GemmPath::OneDnn},
      {"bf16 MLP layer batch 16, widened", x_wt(16, 784, 128, kBFloat16), kIntelNoBf16, GemmPath::Narrow},
      {"bf16 classifier, widened", x_wt(128, 784, 10, kBFloat16), kIntelNoBf16, GemmPath::NarrowTransposed},
      {"bf16 classifier, bf16 units", x_wt(128, 784, 10, kBFloat16), kZen4, GemmPath::OneDnn},
      {"f16 square", dense(1024, 1024, 1024, kFloat16), kZen4, kPackedHere},
      {"f16 square, AVX2 only", dense(1024, 1024, 1024, kFloat16), kAvx2, GemmPath::Widening},
      {"f16 MLP layer batch 16", x_wt(16, 784, 128, kFloat16), kAmx, GemmPath::Narrow},
      {"bf16 weight grad batch 16", weight_grad(16, 512, 784, kBFloat16), kZen4, GemmPath::ShortInner},
      {"f16 weight grad batch 32", weight_grad(32, 512, 784, kFloat16), kAvx2, GemmPath::ShortInner},
      {"bf16 weight grad batch 33: too deep", weight_grad(33, 512, 784, kBFloat16), kZen4, GemmPath::OneDnn},
      // A widened product asks for short_inner first (its float32 result in one pass), a plain
      // one for narrow first: 16 rows, k 32, 4096 columns take both.
      {"f16 16 x 32 x 4096 product", dense(16, 32, 4096, kFloat16), kZen4, GemmPath::Narrow},
      {"f16 16 x 32 x 4096 widened", dense(16, 32, 4096, kFloat16, GemmCaller::Widened), kZen4, GemmPath::ShortInner},
      {"bf16 widened square, bf16 units", dense(512, 512, 512, kBFloat16, GemmCaller::Widened), kAmx, GemmPath::OneDnn},
      {"bf16 widened square, no bf16 units", dense(512, 512, 512, kBFloat16, GemmCaller::Widened), kIntelNoBf16,
       kPackedHere},
      // Products inside other kernels (convolution's im2col, the widening panels): oneDNN's sgemm
      // or OpenBLAS only, never the in-register kernels.
      {"kernel f32 large", dense(64, 576, 784, kFloat32, GemmCaller::Kernel), kZen4, GemmPath::OneDnn},
      {"f32 batch 16, oneDNN off", x_wt(16, 4096, 4096, kFloat32), kZen4OneDnnOff, GemmPath::Narrow},
      {"kernel f32 small", dense(8, 27, 100, kFloat32, GemmCaller::Kernel), kZen4, GemmPath::Blas},
      {"kernel f32, oneDNN off", dense(64, 576, 784, kFloat32, GemmCaller::Kernel), kZen4OneDnnOff, GemmPath::Blas},
      {"kernel f64", dense(64, 576, 784, kFloat64, GemmCaller::Kernel), kZen4, GemmPath::Blas},
  };
  for (const Row& r : table) {
    CAPTURE(r.what);
    CHECK(cpu::path_name(cpu::route(r.problem, r.caps)) == cpu::path_name(r.expected));
  }
}

TEST_CASE("route: where oneDNN declines, bfloat16 widens and float32 goes to OpenBLAS") {
  CHECK(cpu::onednn_fallback(dense(512, 512, 512, kBFloat16), kZen4) == kPackedHere);
  CHECK(cpu::onednn_fallback(dense(512, 512, 512, kBFloat16), kAvx2) == GemmPath::Widening);
  CHECK(cpu::onednn_fallback(dense(512, 512, 512, kFloat32), kZen4) == GemmPath::Blas);
}

TEST_CASE("route: a forced path (HG_CPU_GEMM) is taken wherever it can compute the product") {
  const GemmProblem f32 = dense(1024, 1024, 1024, kFloat32), bf16 = dense(1024, 1024, 1024, kBFloat16);
  CHECK(cpu::route(f32, kZen4, GemmPath::Blas) == GemmPath::Blas);
  CHECK(cpu::route(bf16, kZen4, GemmPath::Widening) == GemmPath::Widening);
  CHECK(cpu::route(x_wt(16, 4096, 4096, kFloat32), kZen4, GemmPath::OneDnn) == GemmPath::OneDnn);
  CHECK(cpu::route(dense(4, 64, 64, kFloat32), kZen4, GemmPath::Narrow) == GemmPath::Narrow);
  // Paths that cannot take the product leave it to the usual route: OpenBLAS has no bfloat16,
  // narrow no float64, oneDNN is off, packed needs AVX-512, and kernels' products take only the
  // library paths.
  CHECK(cpu::route(bf16, kZen4, GemmPath::Blas) == GemmPath::OneDnn);
  CHECK(cpu::route(dense(4, 64, 64, kFloat64), kZen4, GemmPath::Narrow) == GemmPath::Blas);
  CHECK(cpu::route(f32, kZen4OneDnnOff, GemmPath::OneDnn) == GemmPath::Blas);
  CHECK(cpu::route(bf16, kAvx2, GemmPath::Packed) == GemmPath::Widening);
  CHECK(cpu::route(dense(17, 64, 64, kFloat32), kZen4, GemmPath::Narrow) != GemmPath::Narrow);
  CHECK(cpu::route(dense(64, 576, 784, kFloat32, GemmCaller::Kernel), kZen4, GemmPath::Narrow) == GemmPath::OneDnn);
  CHECK(cpu::route(dense(64, 576, 784, kFloat32, GemmCaller::Kernel), kZen4, GemmPath::Blas) == GemmPath::Blas);
}

TEST_CASE("HG_CPU_GEMM names: each path's name parses back, a bad one says what is valid") {
  for (const GemmPath p : {GemmPath::Narrow, GemmPath::NarrowTransposed, GemmPath::ShortInner, GemmPath::OneDnn,
                           GemmPath::Packed, GemmPath::Widening, GemmPath::Blas, GemmPath::DenseBlas}) {
    CAPTURE(std::string(cpu::path_name(p)));
    CHECK(cpu::parse_gemm_path(cpu::path_name(p)) == p);
  }
  hg::test::check_error([] { (void)cpu::parse_gemm_path("fast"); },
                        {"HG_CPU_GEMM", "'fast'",
                         "narrow, narrow_transposed, short_inner, onednn, packed, widening, "
                         "blas, dense_blas"});
  hg::test::check_error([] { (void)cpu::parse_gemm_path("OneDNN"); }, {"HG_CPU_GEMM"});
}

TEST_CASE("describe_routes names the capabilities and each dtype's paths") {
  const std::string zen4 = cpu::describe_routes(kZen4);
  CHECK(zen4.find("(avx2 avx512 avx512_bf16, oneDNN, 2 threads)") != std::string::npos);
  CHECK(cpu::describe(kAmx).find("avx2 avx512 avx512_bf16 amx, oneDNN") == 0);
  CHECK(cpu::describe(kZen4OneDnnOff).find("oneDNN off (HG_CPU_ONEDNN=0)") != std::string::npos);
  CHECK(zen4.find("float32 onednn/narrow/narrow_transposed/onednn") != std::string::npos);
  const std::string forced = cpu::describe_routes(kZen4, GemmPath::Blas);
  CHECK(forced.find("HG_CPU_GEMM=blas") != std::string::npos);
  CHECK(forced.find("float32 blas/blas/blas/blas") != std::string::npos);
}
