// Products with few rows against a large weight (kernels/cpu/gemm/narrow.h): a linear layer's
// forward and input gradient at a small batch, in float32, bfloat16 and float16, against
// float64; and the in-register rounding the hand-blocked kernels store with.
#include <bit>
#include <cmath>

#include "helpers.h"
#include "kernels/cpu/gemm/narrow.h"
#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/simd/lanes16.h"
#include "kernels/cpu/thread_pool.h"

using namespace hg;
using hg::test::check_close;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {
Tensor narrow_reference(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kFloat64).contiguous(), y = b.to(kFloat64).contiguous();
  const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
  const int64_t m = x.shape()[0], k = x.shape()[1], n = y.shape()[1];
  std::vector<double> r(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double s = xv[static_cast<size_t>(i * k + p)];
      for (int64_t j = 0; j < n; ++j) r[static_cast<size_t>(i * n + j)] += s * yv[static_cast<size_t>(p * n + j)];
    }
  return tensor(r, {m, n});
}

// float32 sums of up to ~4000 products of unit normals; 16-bit results within their rounding.
Tolerance narrow_tolerance(Dtype d) { return d == kFloat32 ? Tolerance{2e-3, 1e-4} : hg::test::tolerance(d); }

struct NarrowShape {
  int64_t m, k, n;
};

// Whether this machine's route (no HG_CPU_GEMM) for [m, k] @ [k, n] with these strides is `path`.
bool routed(cpu::GemmPath path, int64_t m, int64_t k, int64_t n, int64_t sa_row, int64_t sa_col, int64_t sb_row,
            int64_t sb_col, Dtype d) {
  return cpu::route(cpu::GemmProblem{m, k, n, sa_row, sa_col, sb_row, sb_col, d}, cpu::cpu_caps()) == path;
}
// narrow for a by rows and b with these strides: float32 (never widened) or, with `widens`,
// float16 (always widened).
bool narrow(int64_t m, int64_t k, int64_t n, int64_t sb_row, int64_t sb_col, bool widens = false) {
  return routed(cpu::GemmPath::Narrow, m, k, n, k, 1, sb_row, sb_col, widens ? kFloat16 : kFloat32);
}
// narrow_transposed for b = W^T (by columns) and a with column stride sa_col.
bool narrow_transposed(int64_t m, int64_t k, int64_t n, int64_t sa_col, bool widens) {
  return routed(cpu::GemmPath::NarrowTransposed, m, k, n, sa_col == 1 ? k : 1, sa_col, 1, k,
                widens ? kFloat16 : kFloat32);
}
bool narrow_float_dots(int64_t m, int64_t k, int64_t n, int64_t sa_col) {
  return narrow_transposed(m, k, n, sa_col, false);
}
constexpr int64_t kNarrowRows = cpu::kGemmThresholds.narrow_rows;
}  // namespace

TEST_CASE("narrow products (few rows, a large weight) match float64 with the weight read either way") {
  // Row counts off the kernels' row groups (4 and 8), k off the 16 lanes, n off the 4-row and
  // 32-column blocks, and one n small enough that the column blocks shrink below their width.
  manual_seed(21);
  for (const NarrowShape s : {NarrowShape{16, 1024, 1024}, NarrowShape{5, 1037, 1031}, NarrowShape{1, 2048, 600},
                              NarrowShape{13, 4100, 300}}) {
    REQUIRE(narrow(s.m, s.k, s.n, s.n, 1));  // b = W, by rows
    REQUIRE(narrow(s.m, s.k, s.n, 1, s.k));  // b = W^T, by columns
    for (Dtype d : {kFloat32, kBFloat16, kFloat16}) {
      CAPTURE(s.m);
      CAPTURE(s.k);
      CAPTURE(s.n);
      CAPTURE(dtype_name(d));
      const Tensor a = randn({s.m, s.k}).to(d), w_rows = randn({s.k, s.n}).to(d);
      const Tensor w_cols = w_rows.t().contiguous().t();  // the same values stored by columns
      const Tensor ref = narrow_reference(a, w_rows);
      check_close(mm(a, w_rows), ref, narrow_tolerance(d));
      check_close(mm(a, w_cols), ref, narrow_tolerance(d));
      // a transposed in memory and strided: widened into the kernel's own copy either way.
      check_close(mm(a.t().contiguous().t(), w_cols), ref, narrow_tolerance(d));
      check_close(mm(non_contiguous(a), w_rows), ref, narrow_tolerance(d));
      // Batched: every matrix of the batch as alone.
      const Tensor batch = bmm(stack({a, a}), stack({w_rows, w_rows}));
      CHECK(batch.select(0, 1).to(kFloat32).to_vector<float>() == mm(a, w_rows).to(kFloat32).to_vector<float>());
    }
  }
  // The limits: one row too many, or a weight too small, take the other paths.
  CHECK_FALSE(narrow(kNarrowRows + 1, 1024, 1024, 1024, 1));
  CHECK_FALSE(narrow(8, 512, 1024, 1024, 1));
  CHECK_FALSE(narrow(8, 1024, 1024, 2048, 2));  // b strided both ways
}

TEST_CASE("linear at a small batch: bias inside the product, gradients through the narrow kernel") {
  // linear(x, W, b) reads W by columns (x @ W^T, the bias added before the one rounding), its
  // input gradient g @ W reads W by rows.
  manual_seed(22);
  for (Dtype d : {kFloat32, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(d));
    const int64_t batch = 6, in = 1100, out = 1030;
    const Tensor x = randn({batch, in}).to(d), w = randn({out, in}).to(d), b = randn({out}).to(d);
    const Tensor ref = narrow_reference(x, w.t()) + b.to(kFloat64);
    check_close(linear(x, w, b), ref, narrow_tolerance(d));
    check_close(linear(x, w, non_contiguous(b)), ref, narrow_tolerance(d));

    const Tensor xg = x.detach().requires_grad_(true);
    const Tensor g = randn({batch, out}).to(d);
    linear(xg, w, b).backward(g);
    check_close(xg.grad(), narrow_reference(g, w), narrow_tolerance(d));
  }
}

TEST_CASE("bfloat16 narrow products read W in pairs: every tail length, and the input gradient's bits unchanged") {
  // x @ W^T splits each 32 values of a W row by parity (load_bf16_pairs), the tail of k % 32
  // values padded: every residue, with an infinity in the last column to show the tail is read.
  manual_seed(24);
  for (int64_t tail : {0, 1, 15, 16, 17, 31}) {
    CAPTURE(tail);
    const int64_t m = 3, k = 1024 + tail, n = 1024;
    REQUIRE(narrow(m, k, n, 1, k));
    const Tensor a = randn({m, k}).to(kBFloat16), w = randn({n, k}).to(kBFloat16);
    check_close(mm(a, w.t()), narrow_reference(a, w.t()), narrow_tolerance(kBFloat16));
    Tensor w_inf = w.clone();
    w_inf.index_put_({5, k - 1}, full({}, INFINITY, kBFloat16));
    const Tensor out = mm(ones({m, k}, kBFloat16), w_inf.t()).to(kFloat32);
    CHECK(std::isinf(out.index({2, 5}).item<float>()));
    CHECK(std::isfinite(out.index({2, 4}).item<float>()));
  }
  // g @ W (W by rows) sums each output in the same order as float32 does, the columns only
  // stored split by parity in between: the same bits as the float32 product rounded once. (On the
  // bfloat16 dot-product instruction the next test case's order holds instead.)
  if (cpu::narrow_bf16_dots(cpu::cpu_caps())) return;
  for (const NarrowShape s : {NarrowShape{16, 1024, 1024}, NarrowShape{7, 1100, 1030}, NarrowShape{1, 2048, 600}}) {
    CAPTURE(s.n);
    const Tensor g = randn({s.m, s.k}).to(kBFloat16), w = randn({s.k, s.n}).to(kBFloat16);
    const Tensor wide = mm(g.to(kFloat32), w.to(kFloat32)).to(kBFloat16);
    CHECK(hg::test::bitwise_equal(mm(g, w), wide));
  }
}

TEST_CASE("bfloat16 narrow products on the CPU's bfloat16 dot-product instruction" *
          doctest::skip(!cpu::narrow_bf16_dots(cpu::cpu_caps()))) {
  // Both sides in pairs of k: x @ W^T with every tail of k % 32, and g @ W with b's rows
  // interleaved two at a time (an odd k leaves a last row alone), columns past the last 32
  // widened; more than eight rows take 16 rows of b per pass; a short b in one pass (whole
  // depth, up to 128 pairs) or in slices. Against float64, and an inf in b reaching its outputs.
  manual_seed(25);
  for (const NarrowShape s :
       {NarrowShape{16, 1024, 1024}, NarrowShape{7, 1101, 1030}, NarrowShape{9, 1100, 1061}, NarrowShape{1, 2047, 600},
        NarrowShape{16, 256, 4096}, NarrowShape{12, 255, 4128}, NarrowShape{3, 131, 8200}}) {
    CAPTURE(s.m);
    CAPTURE(s.k);
    CAPTURE(s.n);
    REQUIRE(narrow(s.m, s.k, s.n, s.n, 1));
    const Tensor g = randn({s.m, s.k}).to(kBFloat16), w = randn({s.k, s.n}).to(kBFloat16);
    check_close(mm(g, w), narrow_reference(g, w), narrow_tolerance(kBFloat16));
    const Tensor wt = w.t().contiguous();  // [n, k]: x @ W^T reads it by rows
    check_close(mm(g, wt.t()), narrow_reference(g, w), narrow_tolerance(kBFloat16));
    Tensor w_inf = w.clone();
    w_inf.index_put_({s.k - 1, s.n - 1}, full({}, INFINITY, kBFloat16));
    const Tensor out = mm(ones({s.m, s.k}, kBFloat16), w_inf).to(kFloat32);
    CHECK(std::isinf(out.index({s.m - 1, s.n - 1}).item<float>()));
    CHECK(std::isfinite(out.index({s.m - 1, s.n - 2}).item<float>()));
  }
}

TEST_CASE("narrow products give the same bits on one thread as on the pool") {
  // Each output's sum runs in one order whatever the split; inside a pool task every kernel
  // runs on the calling thread alone.
  manual_seed(23);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const Tensor a = randn({9, 1500}).to(d), w = randn({1500, 1300}).to(d);
    const Tensor pooled_rows = mm(a, w), pooled_cols = mm(a, w.t().contiguous().t());
    Tensor alone_rows, alone_cols;
    cpu::run_parallel(2, [&](int64_t i) {
      if (i == 0) {
        alone_rows = mm(a, w);
        alone_cols = mm(a, w.t().contiguous().t());
      }
    });
    CHECK(alone_rows.to(kFloat32).to_vector<float>() == pooled_rows.to(kFloat32).to_vector<float>());
    CHECK(alone_cols.to(kFloat32).to_vector<float>() == pooled_cols.to(kFloat32).to_vector<float>());
  }
  // A weight gradient g^T @ x at a small batch, summed in slices of k rows whatever the thread
  // count (k of two, three and a partial fourth slice), also as autocast's float32 form.
  for (Dtype d : {kFloat16, kBFloat16}) {
    for (const int64_t batch : {128, 160, 250}) {
      CAPTURE(dtype_name(d));
      CAPTURE(batch);
      const Tensor g = randn({batch, 10}).to(d), x = randn({batch, 784}).to(d);
      REQUIRE(narrow(10, batch, 784, 784, 1, true));
      const Tensor pooled = mm(g.t(), x);
      Tensor alone;
      cpu::run_parallel(2, [&](int64_t i) {
        if (i == 0) alone = mm(g.t(), x);
      });
      CHECK(hg::test::bitwise_equal(alone, pooled));
      check_close(pooled, narrow_reference(g.t(), x), narrow_tolerance(d));
    }
  }
}

TEST_CASE("16-bit narrow products with a smaller weight, and a few columns against many rows (transposed)") {
  // 16-bit products that would be widened take narrow_gemm from kNarrowMinWeightsWidened values
  // of b; x @ W^T with at most kNarrowRows columns runs transposed (out^T = W @ x^T on the dot
  // path). On a CPU with bfloat16 units, bfloat16 keeps oneDNN's path: the same results within
  // the same tolerance. Row counts that fit
  // one axpy group (10, 12) and one that does not (13); column tails of 16 (the vector tail) and 7.
  manual_seed(25);
  for (const NarrowShape s :
       {NarrowShape{10, 128, 784}, NarrowShape{12, 256, 272}, NarrowShape{13, 300, 519}, NarrowShape{3, 1040, 71}}) {
    REQUIRE(narrow(s.m, s.k, s.n, s.n, 1, true));
    REQUIRE_FALSE(narrow(s.m, s.k, s.n, s.n, 1, false));
    REQUIRE(narrow_transposed(s.n, s.k, s.m, 1, true));
    for (Dtype d : {kBFloat16, kFloat16}) {
      CAPTURE(s.m);
      CAPTURE(s.k);
      CAPTURE(s.n);
      CAPTURE(dtype_name(d));
      const Tensor g = randn({s.m, s.k}).to(d), x = randn({s.k, s.n}).to(d);
      check_close(mm(g, x), narrow_reference(g, x), narrow_tolerance(d));  // a weight gradient g^T @ x, by rows
      // Transposed: [n, k] rows against m <= 16 columns of W^T, and with W read from a copy.
      const Tensor big = x.t().contiguous(), w = randn({s.m, s.k}).to(d);
      const Tensor ref = narrow_reference(big, w.t());
      check_close(mm(big, w.t()), ref, narrow_tolerance(d));
      check_close(mm(big, w.t().contiguous()), ref, narrow_tolerance(d));
      // Inside linear: the bias (one per column) added before the one rounding.
      const Tensor bias = randn({s.m}).to(d);
      check_close(linear(big, w, bias), ref + bias.to(kFloat64), narrow_tolerance(d));
      // A batch: each matrix as alone.
      const Tensor batch = bmm(stack({big, big}), stack({w.t(), w.t()}));
      CHECK(hg::test::bitwise_equal(batch.select(0, 1), mm(big, w.t())));
    }
  }
  // Not transposed: too many columns, too few rows, a large operand not stored by rows, or a
  // product that is not widened otherwise (float32).
  CHECK_FALSE(narrow_transposed(784, 128, kNarrowRows + 1, 1, true));
  CHECK_FALSE(narrow_transposed(32, 128, 10, 1, true));
  CHECK_FALSE(narrow_transposed(784, 128, 10, 784, true));
  CHECK_FALSE(narrow_transposed(784, 128, 10, 1, false));
}

TEST_CASE("float32 x @ W^T with few outputs and a long k runs on the transposed dot path") {
  // [batch, k] @ [k, n] for n <= kNarrowFloatCols and k >= kNarrowFloatMinDepth (a classifier's
  // last layer): against float64, with the bias inside linear, on one thread as on the pool, and
  // with an infinity in the dot products' tail.
  manual_seed(27);
  for (const NarrowShape s : {NarrowShape{128, 784, 10}, NarrowShape{70, 1037, 12}, NarrowShape{200, 3136, 1}}) {
    CAPTURE(s.m);
    CAPTURE(s.k);
    CAPTURE(s.n);
    REQUIRE(narrow_float_dots(s.m, s.k, s.n, 1));
    const Tensor x = randn({s.m, s.k}), w = randn({s.n, s.k}), bias = randn({s.n});
    const Tensor ref = narrow_reference(x, w.t());
    check_close(mm(x, w.t()), ref, narrow_tolerance(kFloat32));
    check_close(linear(x, w, bias), ref + bias.to(kFloat64), narrow_tolerance(kFloat32));
    Tensor alone;
    cpu::run_parallel(2, [&](int64_t i) {
      if (i == 0) alone = mm(x, w.t());
    });
    CHECK(hg::test::bitwise_equal(alone, mm(x, w.t())));
    Tensor x_inf = x.clone();
    x_inf.index_put_({s.m - 1, s.k - 1}, full({}, INFINITY));
    const Tensor out = mm(x_inf, w.t());
    CHECK(std::isinf(out.index({s.m - 1, 0}).item<float>()));
    CHECK(std::isfinite(out.index({0, 0}).item<float>()));
  }
  // Where oneDNN's sgemm was as fast: 16 outputs, a short k, or the large operand not stored by rows.
  CHECK_FALSE(narrow_float_dots(128, 784, cpu::kGemmThresholds.narrow_float_cols + 1, 1));
  CHECK_FALSE(narrow_float_dots(1024, cpu::kGemmThresholds.narrow_float_min_depth - 1, 10, 1));
  CHECK_FALSE(narrow_float_dots(128, 784, 10, 128));
}

TEST_CASE("transposed narrow products: inf and NaN reach their outputs, and one thread gives the pool's bits") {
  manual_seed(26);
  for (Dtype d : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(d));
    Tensor x = randn({200, 333}).to(d);
    const Tensor w = randn({10, 333}).to(d);
    REQUIRE(narrow_transposed(200, 333, 10, 1, true));
    const Tensor pooled = mm(x, w.t());
    Tensor alone;
    cpu::run_parallel(2, [&](int64_t i) {
      if (i == 0) alone = mm(x, w.t());
    });
    CHECK(hg::test::bitwise_equal(alone, pooled));
    x.index_put_({17, 332}, full({}, INFINITY, d));  // the last column: the dot products' tail
    x.index_put_({199, 0}, full({}, NAN, d));
    const Tensor out = mm(x, w.t()).to(kFloat32);
    CHECK(std::isinf(out.index({17, 3}).item<float>()));
    CHECK(std::isnan(out.index({199, 9}).item<float>()));
    CHECK(std::isfinite(out.index({18, 9}).item<float>()));
  }
}

TEST_CASE("narrow products carry inf and NaN to the outputs they feed") {
  for (Dtype d : {kFloat32, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(d));
    Tensor a = ones({4, 1024}, d), w = zeros({1024, 1024}, d);
    a.index_put_({1, 7}, full({}, NAN, d));
    w.index_put_({3, 5}, full({}, INFINITY, d));  // row 3 of W meets column 3 of a (ones)
    for (const Tensor& b : {w, w.t().contiguous().t()}) {
      const Tensor out = mm(a, b).to(kFloat32);
      CHECK(std::isinf(out.index({0, 5}).item<float>()));
      CHECK(std::isnan(out.index({1, 0}).item<float>()));  // NaN * 0 is NaN
      CHECK(out.index({2, 6}).item<float>() == 0.0f);
    }
  }
}

TEST_CASE(
    "the kernels' in-register rounding (stored 16-bit or widened) matches hg::BFloat16 and hg::Half bit for bit") {
  // Ties both ways, subnormals (vcvtneps2bf16 would flush these), the largest finite values,
  // infinities and NaNs with payloads, then a sweep of bit patterns across the whole range.
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                0x7fc00000u, 0x7f800001u, 0xffa00001u, 0x477fe000u, 0x477ff000u, 0x33000000u};
  for (uint32_t x = 0x00012345u; bits.size() < 16 * 1024; x += 0x0000fedbu) bits.push_back(x * 2654435761u);
  while (bits.size() % 16 != 0) bits.push_back(0x3f800000u);
  for (size_t i = 0; i < bits.size(); i += 16) {
    cpu::Lanes16 v;
    for (int l = 0; l < 16; ++l) v[l] = std::bit_cast<float>(bits[i + static_cast<size_t>(l)]);
    BFloat16 b[16];
    Half h[16];
    cpu::store_lanes16(b, v);
    cpu::store_lanes16(h, v);
    for (int l = 0; l < 16; ++l) {
      CAPTURE(bits[i + static_cast<size_t>(l)]);
      CHECK(b[l].bits == BFloat16(v[l]).bits);
      CHECK(h[l].bits == Half(v[l]).bits);
    }
    // Rounded and widened in registers (a weight gradient stored as float32): the same values.
    float wide_b[16], wide_h[16];
    cpu::store_lanes16_widened<BFloat16>(wide_b, v);
    cpu::store_lanes16_widened<Half>(wide_h, v);
    for (int l = 0; l < 16; ++l) {
      CHECK(std::bit_cast<uint32_t>(wide_b[l]) == std::bit_cast<uint32_t>(static_cast<float>(b[l])));
      CHECK(std::bit_cast<uint32_t>(wide_h[l]) == std::bit_cast<uint32_t>(static_cast<float>(h[l])));
    }
    // And back: widening is exact.
    const cpu::Lanes16 wb = cpu::load_lanes16(b), wh = cpu::load_lanes16(h);
    for (int l = 0; l < 16; ++l) {
      CHECK(std::bit_cast<uint32_t>(wb[l]) == std::bit_cast<uint32_t>(static_cast<float>(b[l])));
      CHECK(std::bit_cast<uint32_t>(wh[l]) == std::bit_cast<uint32_t>(static_cast<float>(h[l])));
    }
  }
}
