// Matrix products and sums against float64 references.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <string>

#include "framework/dispatch.h"
#include "helpers.h"
#include "kernels/cpu/conv/onednn.h"
#include "kernels/cpu/gemm/onednn.h"
#include "kernels/cpu/gemm/packed.h"
#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/gemm/short_inner.h"
#include "kernels/cpu/gemm/widening.h"
#include "kernels/cpu/thread_pool.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {
Tensor mm_reference(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  std::vector<double> r(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * y[p * n + j];
      r[i * n + j] = s;
    }
  return tensor(r, {m, n});
}

// [m, k] @ [k, n] problem sizes.
struct Shape3 {
  int64_t m, k, n;
};

// The 16-bit product on float32 arithmetic the router picks here: packed_gemm where it is built
// and the CPU has AVX-512, else widening_gemm; `fallback` forces widening_gemm.
template <class T, class Out>
void sixteen_bit_gemm(Out* out, const T* a, int64_t sa_row, int64_t sa_col, const T* b, int64_t sb_row, int64_t sb_col,
                      int64_t m, int64_t k, int64_t n, const T* bias = nullptr, bool fallback = false) {
  if (!fallback && cpu::kPackedGemmBuilt && cpu::cpu_caps().avx512) {
    cpu::packed_gemm<T, Out>(out, a, sa_row, sa_col, b, sb_row, sb_col, m, k, n, bias);
  } else {
    cpu::widening_gemm<T, Out>(out, a, sa_row, sa_col, b, sb_row, sb_col, m, k, n, bias);
  }
}

// sixteen_bit_gemm on tensors: x [m, k] and y [k, n] of one 16-bit dtype as strided as they are,
// and a dense bias when defined.
Tensor widening_gemm_of(const Tensor& x, const Tensor& y, const Tensor& bias = Tensor(), bool fallback = false) {
  Tensor out = empty({x.size(0), y.size(1)}, x.dtype());
  const auto run = [&]<class T>(TypeTag<T>) {
    sixteen_bit_gemm<T, T>(static_cast<T*>(out.raw_data()), static_cast<const T*>(x.raw_data()), x.stride(0),
                           x.stride(1), static_cast<const T*>(y.raw_data()), y.stride(0), y.stride(1), x.size(0),
                           x.size(1), y.size(1), bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr,
                           fallback);
  };
  if (x.dtype() == kFloat16) {
    run(TypeTag<Half>{});
  } else {
    run(TypeTag<BFloat16>{});
  }
  return out;
}

// Whether this machine's route (no HG_CPU_GEMM) for [m, k] @ [k, n], both row-major, of dtype d
// as a widened product is `path`.
bool routed_widened(cpu::GemmPath path, const Shape3& s, Dtype d) {
  const cpu::GemmProblem p{s.m, s.k, s.n, s.k, 1, s.n, 1, d, cpu::GemmCaller::Widened};
  return cpu::route(p, cpu::cpu_caps()) == path;
}
}  // namespace

TEST_CASE("mm matches float64 in every float dtype, with transposed and strided operands") {
  manual_seed(4);
  const Tensor a64 = randn({13, 17}, kFloat64), b64 = randn({17, 9}, kFloat64);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor a = a64.to(d), b = b64.to(d);
    const Tensor ref = mm_reference(a.to(kFloat64), b.to(kFloat64));
    // Accumulation over k=17 in float32, one rounding at the end.
    const Tolerance tol = d == kFloat64   ? Tolerance{1e-10, 1e-10}
                          : d == kFloat32 ? Tolerance{1e-4, 1e-4}
                                          : hg::test::tolerance(d);
    check_close(mm(a, b), ref, tol);
    check_close(mm(non_contiguous(a), non_contiguous(b)), ref, tol);
    check_close(mm(a.t().contiguous().t(), b), ref, tol);
    check_close(mm(a.slice(1, 0, 17, 1), b.slice(0, 0, 17, 1)), ref, tol);
    CHECK(mm(a, b).dtype() == d);
  }
}

TEST_CASE("float32 and bfloat16 mm on the fast paths match float64, split across threads") {
  // Large enough that the oneDNN path splits the work over the thread pool (by rows, then by
  // columns), with sizes that are not multiples of its tiles. A transposed bfloat16 a with a
  // wide b (96 x 700) is copied dense first, as a weight gradient's g^T is.
  manual_seed(41);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const cpu::GemmProblem square{300, 300, 300, 300, 1, 300, 1, d};
    const std::string path{cpu::path_name(cpu::route(square, cpu::cpu_caps()))};
    MESSAGE(dtype_name(d) << " matmul path: " << path);
    // float32 accumulates either way; bfloat16 products are exact in float32 and the result is
    // rounded once to bfloat16.
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-3, 1e-4} : Tolerance{2e-2, 1.0 / 128};
    for (const auto& mn : {std::pair<int64_t, int64_t>{203, 150}, {70, 333}, {96, 700}}) {
      const int64_t m = mn.first, n = mn.second;  // no structured binding: clang 14 cannot capture one
      CAPTURE(m);
      const Tensor a = randn({m, 300}, kFloat64).to(d), b = randn({300, n}, kFloat64).to(d);
      const Tensor ref = mm_reference(a.to(kFloat64), b.to(kFloat64));
      check_close(mm(a, b), ref, tol);
      check_close(mm(a.t().contiguous().t(), b), ref, tol);                 // a read transposed
      check_close(mm(a, b.t().contiguous().t()), ref, tol);                 // b read transposed
      check_close(mm(a.slice(0, 3, m, 1), b), ref.slice(0, 3, m, 1), tol);  // offset rows
      check_close(mm(a, b.slice(1, 5, n, 1)), ref.slice(1, 5, n, 1), tol);  // offset columns
      Tensor spaced = zeros({m, 600}, d);
      spaced.slice(1, 0, 600, 2).copy_(a);
      check_close(mm(spaced.slice(1, 0, 600, 2), b), ref, tol);  // strided both ways: OpenBLAS
      const Tensor batched = bmm(stack({a, a}), stack({b, b * 2.0}));
      check_close(batched.select(0, 0), ref, tol);
      check_close(batched.select(0, 1), ref * 2.0, {2 * tol.atol, tol.rtol});
    }
    CHECK(mm(zeros({0, 300}, d), zeros({300, 150}, d)).shape() == Shape{0, 150});
  }
}

TEST_CASE("float32 x @ W^T on oneDNN's matmul primitive: parts by rows and by columns, staged") {
  // A float32 product whose b is stored by columns (a weight read as W^T) with an inner
  // dimension of at least 256 runs each part of 4M multiply-adds or more on oneDNN's matmul
  // primitive (brgemm) where it has one, split as sgemm would split it: by rows when a has more
  // rows than b has columns (300 x 129), else by columns (61 x 700), each column part written to
  // a dense buffer and copied into its columns (with two threads or more). Sizes off the
  // kernels' tiles; linear (its bias added after the product) too.
  manual_seed(53);
  for (const auto& mn : {std::pair<int64_t, int64_t>{300, 129}, {61, 700}, {128, 128}}) {
    const int64_t m = mn.first, n = mn.second;
    CAPTURE(m);
    const Tensor x = randn({m, 1000}), w = randn({n, 1000}), bias = randn({n});
    const Tensor ref = mm_reference(x.to(kFloat64), w.to(kFloat64).t().contiguous());
    check_close(mm(x, w.t()), ref, {1e-3, 1e-4});
    check_close(linear(x, w, bias), ref + bias.to(kFloat64), {1e-3, 1e-4});
  }
}

TEST_CASE("16-bit products with a short inner dimension (weight gradients at small batch) match float64") {
  // Row counts off the 8-row blocks, column counts off the 16-lane vectors, k from 1 to the
  // limit, and a transposed first operand (g^T in g^T x) as a weight gradient has.
  manual_seed(11);
  for (const Shape3 s : {Shape3{520, 1, 130}, Shape3{1003, 7, 77}, Shape3{261, 16, 513}, Shape3{64, 32, 1030}}) {
    for (Dtype d : {kBFloat16, kFloat16}) {
      REQUIRE(routed_widened(cpu::GemmPath::ShortInner, s, d));
      CAPTURE(s.m);
      CAPTURE(s.k);
      CAPTURE(s.n);
      CAPTURE(dtype_name(d));
      const Tensor g = randn({s.k, s.m}).to(d), x = randn({s.k, s.n}).to(d);
      const Tensor a = g.t();  // [m, k], transposed in memory
      const Tensor ref = mm_reference(a.to(kFloat64).contiguous(), x.to(kFloat64));
      // float32 accumulation of at most 32 terms, then one rounding: within a 16-bit rounding.
      check_close(mm(a, x), ref, hg::test::tolerance(d));
      check_close(mm(a.contiguous(), non_contiguous(x)), ref, hg::test::tolerance(d));
      // Batched, through bmm: every matrix of the batch the same as alone.
      const Tensor batch = bmm(a.unsqueeze(0).expand({2, s.m, s.k}), x.unsqueeze(0).expand({2, s.k, s.n}));
      CHECK(batch.select(0, 1).to(kFloat32).to_vector<float>() == mm(a, x).to(kFloat32).to_vector<float>());
    }
  }
  // inf and NaN reach the outputs they feed, as in any float32 sum.
  Tensor a = zeros({128, 4}, kBFloat16), b = ones({4, 1024}, kBFloat16);
  a.index_put_({0, 1}, full({}, INFINITY, kBFloat16));
  a.index_put_({1, 2}, full({}, NAN, kBFloat16));
  const Tensor out = mm(a, b).to(kFloat32);
  CHECK(std::isinf(out.index({0, 5}).item<float>()));
  CHECK(std::isnan(out.index({1, 1023}).item<float>()));
  CHECK(out.index({2, 0}).item<float>() == 0.0f);
}

TEST_CASE("16-bit products widened panel by panel onto the float32 kernels match float64") {
  // float16 always takes this path (bfloat16 only where the CPU has no bfloat16 units, so it is
  // called directly here). Small operands are widened whole; {300, 1100, 800} is past that limit
  // and crosses the row tiles (256), the panel depth (512) and the column tiles. Operands come
  // row-major, transposed (a weight seen through .t()) and strided.
  manual_seed(12);
  for (const Shape3 s :
       {Shape3{300, 1100, 800}, Shape3{300, 600, 270}, Shape3{5, 1030, 40}, Shape3{1, 7, 1}, Shape3{70, 33, 513}}) {
    for (Dtype d : {kFloat16, kBFloat16}) {
      CAPTURE(s.m);
      CAPTURE(s.k);
      CAPTURE(s.n);
      CAPTURE(dtype_name(d));
      const Tensor a = randn({s.m, s.k}).to(d), b = randn({s.k, s.n}).to(d);
      const Tensor ref = mm_reference(a.to(kFloat64), b.to(kFloat64));
      const Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t(), bs = non_contiguous(b);
      for (const auto& [x, y] : {std::pair{a, b}, std::pair{at, b}, std::pair{a, bt}, std::pair{at, bs}}) {
        if (d == kFloat16) check_close(mm(x, y), ref, hg::test::tolerance(d));  // the public op takes the same path
        check_close(widening_gemm_of(x, y), ref, hg::test::tolerance(d));
        check_close(widening_gemm_of(x, y, Tensor(), true), ref, hg::test::tolerance(d));  // where no AVX-512
      }
    }
  }
  // A bias, added before the one rounding, on both paths (whole and panels).
  for (const Shape3 s : {Shape3{40, 1100, 1000}, Shape3{40, 100, 90}}) {
    CAPTURE(s.k);
    const Tensor a = randn({s.m, s.k}).to(kFloat16), b = randn({s.k, s.n}).to(kFloat16);
    const Tensor bias = randn({s.n}).to(kFloat16);
    const Tensor ref = mm_reference(a.to(kFloat64), b.to(kFloat64)) + bias.to(kFloat64);
    check_close(widening_gemm_of(a, b, bias), ref, hg::test::tolerance(kFloat16));
    check_close(widening_gemm_of(a, b, bias, true), ref, hg::test::tolerance(kFloat16));
  }
  // inf and NaN reach the outputs they feed.
  Tensor a = zeros({300, 600}, kFloat16), b = ones({600, 300}, kFloat16);
  a.index_put_({0, 599}, full({}, INFINITY, kFloat16));
  a.index_put_({299, 1}, full({}, NAN, kFloat16));
  const Tensor out = mm(a, b).to(kFloat32);
  CHECK(std::isinf(out.index({0, 299}).item<float>()));
  CHECK(std::isnan(out.index({299, 0}).item<float>()));
  CHECK(out.index({1, 0}).item<float>() == 0.0f);
}

TEST_CASE("16-bit products packed from 16-bit storage: tile edges, k = 0, float32 output, any thread count") {
  // With AVX-512 the router picks kernels/cpu/gemm/packed.cpp: rows past 1024 (a second row
  // tile), columns past 512, k split into equal panels (600 as 3 x 200) with a 16-value
  // transpose tail, and row/column counts off the 8 x 32 register tile; every layout of a and b.
  manual_seed(13);
  for (const Shape3 s : {Shape3{1030, 20, 40}, Shape3{37, 600, 530}, Shape3{9, 17, 33}}) {
    for (Dtype d : {kFloat16, kBFloat16}) {
      CAPTURE(s.m);
      CAPTURE(s.k);
      CAPTURE(s.n);
      CAPTURE(dtype_name(d));
      const Tensor a = randn({s.m, s.k}).to(d), b = randn({s.k, s.n}).to(d);
      const Tensor ref = mm_reference(a.to(kFloat64), b.to(kFloat64));
      const Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();
      for (const auto& [x, y] : {std::pair{a, b}, std::pair{at, b}, std::pair{a, bt}, std::pair{at, bt},
                                 std::pair{non_contiguous(a), non_contiguous(b)}}) {
        check_close(widening_gemm_of(x, y), ref, hg::test::tolerance(d));
      }
    }
  }
  // The float32 output is the 16-bit result widened, bit for bit; one thread gives the pool's bits.
  const Tensor a = randn({70, 300}).to(kFloat16), b = randn({300, 90}).to(kFloat16);
  const Tensor product = widening_gemm_of(a, b);
  Tensor wide = empty({70, 90}, kFloat32);
  sixteen_bit_gemm<Half, float>(static_cast<float*>(wide.raw_data()), static_cast<const Half*>(a.raw_data()), 300, 1,
                                static_cast<const Half*>(b.raw_data()), 90, 1, 70, 300, 90);
  CHECK(hg::test::bitwise_equal(wide, product.to(kFloat32)));
  Tensor alone;
  cpu::run_parallel(2, [&](int64_t i) {
    if (i == 0) alone = widening_gemm_of(a, b);
  });
  CHECK(hg::test::bitwise_equal(alone, product));
  // k = 0: zeros, plus the bias when there is one.
  const Tensor empty_a = zeros({5, 0}, kBFloat16), empty_b = zeros({0, 7}, kBFloat16);
  CHECK(hg::test::bitwise_equal(widening_gemm_of(empty_a, empty_b), zeros({5, 7}, kBFloat16)));
  const Tensor bias = randn({7}).to(kBFloat16);
  CHECK(
      hg::test::bitwise_equal(widening_gemm_of(empty_a, empty_b, bias), bias.unsqueeze(0).expand({5, 7}).contiguous()));
}

TEST_CASE("16-bit products round each sum once, to nearest even, as the scalar conversion does") {
  // Small integers make every sum exact in float32, so the one rounding to float16/bfloat16 is
  // checked against hg::Half / hg::BFloat16 bit for bit: sums past 256 (bfloat16) or 2048
  // (float16) fall on ties. Single and several k panels, with and without a bias, the 16-bit
  // and the float32 output, and a partial register tile (37 x 45).
  for (const Shape3 s : {Shape3{37, 200, 45}, Shape3{64, 600, 96}}) {
    for (Dtype d : {kFloat16, kBFloat16}) {
      for (const bool with_bias : {false, true}) {
        CAPTURE(s.k);
        CAPTURE(dtype_name(d));
        CAPTURE(with_bias);
        std::vector<float> av(static_cast<size_t>(s.m * s.k)), bv(static_cast<size_t>(s.k * s.n)),
            biasv(static_cast<size_t>(s.n));
        uint32_t state = 7;
        const auto next_int = [&](int range) {
          state = state * 1664525u + 1013904223u;
          return static_cast<float>(static_cast<int>(state >> 16) % range);
        };
        for (float& v : av) v = next_int(9);  // 0 .. 8
        for (float& v : bv) v = next_int(9) - 2.0f;
        for (float& v : biasv) v = next_int(257) - 128.0f;  // exact in bfloat16 too
        const Tensor a = tensor(av).reshape({s.m, s.k}).to(d), b = tensor(bv).reshape({s.k, s.n}).to(d);
        const Tensor bias = with_bias ? tensor(biasv).to(d) : Tensor();
        const Tensor got = widening_gemm_of(a, b, bias);
        Tensor wide = empty({s.m, s.n}, kFloat32);
        const auto run_wide = [&]<class T>(TypeTag<T>) {
          REQUIRE_FALSE(with_bias);  // the float32 output takes no bias
          sixteen_bit_gemm<T, float>(static_cast<float*>(wide.raw_data()), static_cast<const T*>(a.raw_data()), s.k, 1,
                                     static_cast<const T*>(b.raw_data()), s.n, 1, s.m, s.k, s.n);
        };
        if (!with_bias) d == kFloat16 ? run_wide(TypeTag<Half>{}) : run_wide(TypeTag<BFloat16>{});
        const auto got16 = got.to(kFloat32).to_vector<float>();
        const auto got32 = wide.to_vector<float>();
        int wrong = 0, ties = 0;
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            int64_t sum = with_bias ? static_cast<int64_t>(biasv[static_cast<size_t>(j)]) : 0;
            for (int64_t p = 0; p < s.k; ++p)
              sum += static_cast<int64_t>(av[static_cast<size_t>(i * s.k + p)]) *
                     static_cast<int64_t>(bv[static_cast<size_t>(p * s.n + j)]);
            const auto exact = static_cast<float>(sum);
            const float want = d == kFloat16 ? static_cast<float>(Half(exact)) : static_cast<float>(BFloat16(exact));
            const size_t at = static_cast<size_t>(i * s.n + j);
            wrong += got16[at] != want;
            if (!with_bias) wrong += got32[at] != want;
            ties += std::abs(sum) > 256 && (sum & 1) != 0;
          }
        }
        CHECK(wrong == 0);
        CHECK(ties > 100);  // the data reaches the rounding cases
      }
    }
  }
  // NaN and inf reach the outputs they feed, in both dtypes and both outputs.
  for (Dtype d : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    Tensor a = randn({20, 40}).to(d);
    const Tensor b = randn({40, 50}).abs().to(d) + 0.5;
    a.index_put_({3, 7}, full({}, NAN, d));
    a.index_put_({19, 39}, full({}, INFINITY, d));
    const Tensor out = widening_gemm_of(a, b).to(kFloat32);
    CHECK(std::isnan(out.index({3, 49}).item<float>()));
    CHECK(std::isinf(out.index({19, 0}).item<float>()));
    CHECK(std::isfinite(out.index({4, 0}).item<float>()));
  }
}

TEST_CASE("linear adds its bias inside the product on every CPU path and matches float64") {
  // Shapes for oneDNN's split by rows and by columns (bfloat16 there adds the bias in its
  // kernel), the widening path (float16), a short inner dimension (the bias added afterwards)
  // and an empty batch; the bias dense and strided.
  struct Case {
    int64_t rows, in, out;
  };
  manual_seed(13);
  for (const Case c : {Case{203, 300, 150}, Case{70, 300, 333}, Case{300, 16, 400}, Case{0, 30, 20}}) {
    for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
      CAPTURE(c.rows);
      CAPTURE(c.in);
      CAPTURE(dtype_name(d));
      const Tensor x = randn({c.rows, c.in}, kFloat64).to(d), w = randn({c.out, c.in}, kFloat64).to(d);
      const Tensor b = randn({c.out}, kFloat64).to(d);
      const Tensor ref = mm_reference(x.to(kFloat64), w.to(kFloat64).t().contiguous()) + b.to(kFloat64);
      const Tolerance tol = d == kFloat64   ? Tolerance{1e-10, 1e-10}
                            : d == kFloat32 ? Tolerance{1e-4, 1e-4}
                                            : hg::test::tolerance(d);
      check_close(linear(x, w, b), ref, tol);
      check_close(linear(x, w, non_contiguous(b)), ref, tol);
      check_close(linear(non_contiguous(x), w, b), ref, tol);
      CHECK(linear(x, w, b).dtype() == d);
    }
  }
  // The bias of every output column, whatever part of the split computes it (few rows and many
  // columns: split by columns).
  const Tensor b = arange(0, 2048, 1, kFloat32).to(kBFloat16);
  for (const int64_t rows : {10, 64}) {
    CAPTURE(rows);
    const Tensor x = ones({rows, 256}, kBFloat16), w = zeros({2048, 256}, kBFloat16);
    CHECK(linear(x, w, b).select(0, rows - 1).to(kFloat32).to_vector<float>() == b.to(kFloat32).to_vector<float>());
  }
}

TEST_CASE("the fast matmul path leaves the calling thread's OpenMP team size alone") {
  // oneDNN runs on OpenMP with a team of one while halfgrad calls it; a user's own OpenMP code
  // on the same thread must find its setting unchanged afterwards. Looked up at run time: the
  // OpenMP runtime is only loaded when halfgrad was built with oneDNN.
  using GetFn = int (*)();
  using SetFn = void (*)(int);
  const auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  const auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (get == nullptr || set == nullptr) {
    MESSAGE("no OpenMP runtime loaded: nothing to check");
    return;
  }
  const int before = get();
  set(3);
  const Tensor a = randn({200, 300}), b = randn({300, 150});
  (void)mm(a, b);
  (void)mm(a.to(kBFloat16), b.to(kBFloat16));
  CHECK(get() == 3);
  set(before);
}

namespace {
size_t process_threads() {
  return static_cast<size_t>(
      std::distance(std::filesystem::directory_iterator("/proc/self/task"), std::filesystem::directory_iterator()));
}
// Where oneDNN runs cached primitives: bfloat16 products and convolutions on CPUs with bfloat16
// units, float32 convolutions on AVX-512 CPUs or under HG_CPU_ONEDNN_CONV=float32 (the
// cpu_onednn_conv suite).
bool onednn_primitives_run() {
  return cpu::onednn_conv2d_applies(empty({1}, kBFloat16)) || cpu::onednn_conv2d_applies(empty({1}, kFloat32));
}
}  // namespace

// oneDNN fixes a primitive's OpenMP team size when the primitive is made. Made on a thread asking
// for many, it opened that team on every call, inside halfgrad's pool, and the spinning workers
// halved a bfloat16 weight gradient's speed on a 2-core machine.
TEST_CASE("oneDNN matmul and conv primitives made under a large OpenMP setting open no team" *
          doctest::skip(!onednn_primitives_run())) {
  using GetFn = int (*)();
  using SetFn = void (*)(int);
  const auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  const auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  REQUIRE((get != nullptr && set != nullptr));
  manual_seed(11);
  (void)mm(randn({256, 256}), randn({256, 256}));  // the pool's threads started
  const int before = get();
  const size_t threads = process_threads();
  set(9);
  // Shapes no other test uses, so their primitives are made here, under the setting of 9: a plain
  // product, a transposed a (a weight gradient's g^T, which a reorder copies dense) and a
  // convolution's three passes.
  const Dtype d = cpu::cpu_caps().onednn && cpu::cpu_caps().native_bf16() ? kBFloat16 : kFloat32;
  const Tensor g = randn({97, 131}).to(d), x = randn({97, 389}).to(d), w = randn({389, 131}).to(d);
  check_close(mm(g.t(), x), mm_reference(g.to(kFloat64).t().contiguous(), x.to(kFloat64)), hg::test::tolerance(d));
  check_close(mm(x, w), mm_reference(x.to(kFloat64), w.to(kFloat64)), hg::test::tolerance(d));
  const Tensor image = randn({3, 5, 11, 13}).to(d).requires_grad_(),
               kernel = randn({7, 5, 3, 3}).to(d).requires_grad_();
  conv2d(image, kernel).sum().backward();
  CHECK(get() == 9);
  set(before);
  // A team of 9 would have added 8 threads; allow for one unrelated one.
  CHECK(process_threads() <= threads + 1);
}

TEST_CASE("bmm, matmul broadcasting and linear") {
  manual_seed(5);
  const Tensor a = randn({3, 4, 5}, kFloat64), b = randn({3, 5, 2}, kFloat64);
  const Tensor c = bmm(a, b);
  for (int i = 0; i < 3; ++i) check_close(c.select(0, i), mm_reference(a.select(0, i), b.select(0, i)));
  check_close(matmul(a, b.select(0, 1)).select(0, 2), mm_reference(a.select(0, 2), b.select(0, 1)));
  CHECK(matmul(randn({5}, kFloat64), b.select(0, 0)).shape() == Shape{2});
  CHECK(matmul(randn({5}, kFloat64), randn({5}, kFloat64)).shape() == Shape{});
  const Tensor x = randn({2, 3, 5}, kFloat64), w = randn({4, 5}, kFloat64), bias = randn({4}, kFloat64);
  const Tensor y = linear(x, w, bias);
  CHECK(y.shape() == Shape{2, 3, 4});
  check_close(y.reshape({6, 4}), mm_reference(x.reshape({6, 5}), w.t().contiguous()) + bias);
  check_close(linear(x, w).reshape({6, 4}), mm_reference(x.reshape({6, 5}), w.t().contiguous()));
}

TEST_CASE("matmul gradients") {
  manual_seed(6);
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& x) { return mm(x[0], x[1]); }, {randn({3, 4}), randn({4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return mm(x[0].t(), x[1]); }, {randn({4, 3}), randn({4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return bmm(x[0], x[1]); }, {randn({2, 3, 4}), randn({2, 4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return matmul(x[0], x[1]); }, {randn({2, 3, 4}), randn({4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return linear(x[0], x[1], x[2]); },
                  {randn({2, 3, 4}), randn({5, 4}), randn({5})}));
  CHECK(gradcheck([](const TensorList& x) { return linear(x[0], x[1]); }, {randn({3, 4}), randn({5, 4})}));
}

TEST_CASE("matmul errors: shapes, mixed dtypes, integer operands") {
  check_error([] { mm(zeros({2, 3}), zeros({4, 2})); }, {"[mm]", "[2, 3]", "[4, 2]"});
  check_error([] { mm(zeros({2, 3}), zeros({3, 2}, kBFloat16)); }, {"[mm]", "float32", "bfloat16", "same dtype"});
  check_error([] { mm(zeros({2, 3}, kInt64), zeros({3, 2}, kInt64)); }, {"[mm]", "int64"});
  check_error([] { mm(zeros({2}), zeros({2})); }, {"[mm]", "2-d"});
  check_error([] { linear(zeros({2, 3}), zeros({4, 5})); }, {"[linear]", "in_features"});
  check_error([] { bmm(zeros({2, 3, 4}), zeros({3, 4, 2})); }, {"[bmm]"});
}

TEST_CASE("sum and mean over dims, keepdim, dtypes, accumulation in float32") {
  Tensor a = arange(0.0, 24.0, 1.0, kFloat32).reshape({2, 3, 4});
  CHECK(a.sum().item<float>() == 276.0f);
  CHECK(a.sum({0}).shape() == Shape{3, 4});
  CHECK(a.sum({0, 2}).to_vector<float>() == std::vector<float>{60, 92, 124});
  CHECK(a.sum({-1}, true).shape() == Shape{2, 3, 1});
  CHECK(a.mean({1}).to_vector<float>()[0] == 4.0f);
  CHECK(non_contiguous(a.reshape({6, 4})).sum({0}).to_vector<float>() == a.reshape({6, 4}).sum({0}).to_vector<float>());
  // 4096 ones in bfloat16: a bfloat16 accumulator would stop at 256.
  CHECK(ones({4096}, kBFloat16).sum().item<float>() == 4096.0f);
  CHECK(ones({3}, kInt32).sum().dtype() == kInt64);
  CHECK(sum(ones({3}, kFloat16), kFloat32).dtype() == kFloat32);
  CHECK(ones({3}, kFloat16).mean().dtype() == kFloat16);
  check_error([] { ones({3}, kInt64).mean(); }, {"[mean]", "int64"});
  check_error([&] { a.sum({3}); }, {"[sum]", "dim 3"});
  check_error([&] { a.sum({1, 1}); }, {"[sum]", "more than once"});
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& x) { return x[0].sum({1}); }, {randn({3, 4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return x[0].mean({0, 2}, true); }, {randn({3, 4, 2})}));
  CHECK(gradcheck([](const TensorList& x) { return x[0].sum(); }, {randn({3, 4})}));
}

TEST_CASE("sum over the leading dims of a contiguous tensor (the column-sum path)") {
  // A strided copy of the same values takes the transposed-copy path: the column sums add in the
  // same order, so the results agree bit for bit.
  manual_seed(9);
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases{
      {{128, 512}, {0}}, {{13, 1000}, {0}},   {{7, 3}, {0}},         {{70001, 3}, {0}},
      {{3, 4, 5}, {0}},  {{3, 4, 5}, {0, 1}}, {{5, 2, 300}, {1, 0}}, {{1, 9, 2}, {0}},
  };
  for (Dtype dt : {kFloat32, kFloat64, kBFloat16, kFloat16, kInt32}) {
    for (const Case& c : cases) {
      CAPTURE(dt);
      CAPTURE(c.shape);
      const Tensor x = (randn(c.shape) * 4.0).to(dt);
      REQUIRE(x.is_contiguous());
      const Tensor strided = non_contiguous(x);
      REQUIRE_FALSE(strided.is_contiguous());
      for (bool keepdim : {false, true}) {
        const Tensor got = x.sum(c.dims, keepdim), want = strided.sum(c.dims, keepdim);
        CHECK(got.dtype() == want.dtype());
        CHECK(got.shape() == want.shape());
        check_close(got, want, {0, 0});
      }
      // Against float64, and into a wider dtype (mean's float32 accumulation of 16-bit input).
      if (is_floating(dt)) {
        const Tensor ref = x.to(kFloat64).sum(c.dims);
        check_close(x.sum(c.dims), ref.to(dt), test::tolerance(dt));
        check_close(sum(x, c.dims, false, kFloat32), ref, {1e-3, 1e-5});
      }
    }
  }
  // Empty: nothing to add gives zeros; nothing kept gives an empty result.
  CHECK(zeros({0, 5}).sum({0}).to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(zeros({5, 0}).sum({0}).shape() == Shape{0});
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return t[0].sum({0}); }, {randn({9, 4}, kFloat64)}));
  CHECK(gradcheck([](const TensorList& t) { return t[0].sum({0, 1}, true); }, {randn({3, 2, 4}, kFloat64)}));
}
