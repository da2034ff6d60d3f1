// amp/fp8_ops.h on the CPU: the fused cast + transpose + amax pass (the CPU reference of the CUDA
// kernel) bit for bit against fp8_scaled_cast and a transpose, and the fp8 GEMM's emulation
// against float64 sums of the decoded operands.
#include <cmath>
#include <vector>

#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_error;

namespace {

// Values every rounding path meets once scaled: zeros of both signs, subnormals, ties, values
// beyond both formats' maxima, infinities and NaN, scattered through random normals.
Tensor awkward(int64_t rows, int64_t cols, Dtype dtype, uint64_t seed) {
  manual_seed(seed);
  std::vector<float> v = (randn({rows, cols}) * 40.0).to_vector<float>();
  const float specials[] = {0.0f,  -0.0f,    1e-7f,     -3e-5f, 0.0078125f, 464.0f,   -448.0f, 1e6f,
                            -1e9f, INFINITY, -INFINITY, NAN,    57344.0f,   61440.0f, 2.5f,    -0.013671875f};
  for (size_t i = 0; i < v.size(); i += 7) v[i] = specials[(i / 7) % 16];
  return tensor(v).reshape({rows, cols}).to(dtype);
}

float max_abs_non_nan(const Tensor& t) {
  float m = 0;
  for (float v : t.to(kFloat32).to_vector<float>())
    if (!std::isnan(v)) m = std::max(m, std::fabs(v));
  return m;
}

}  // namespace

TEST_CASE("amp: fp8_cast_transpose: codes bit for bit fp8_scaled_cast's, the transpose its transpose, amax max |x|") {
  for (Dtype in : {kFloat32, kBFloat16, kFloat16}) {
    for (Dtype f8 : {kFloat8E4M3, kFloat8E5M2}) {
      for (const auto& shape : {std::pair<int64_t, int64_t>{37, 53}, {1, 1}, {64, 48}, {3, 200}}) {
        const int64_t rows = shape.first, cols = shape.second;  // clang 14 cannot CAPTURE a structured binding
        CAPTURE(dtype_name(in));
        CAPTURE(dtype_name(f8));
        CAPTURE(rows);
        CAPTURE(cols);
        const Tensor x = awkward(rows, cols, in, static_cast<uint64_t>(rows * 131 + cols));
        const Tensor scale = full({1}, 3.7);
        Tensor amax = zeros({1});
        const amp::Fp8Operand r = amp::fp8_cast_transpose(x, scale, f8, amax, true, true);
        const Tensor expected = amp::fp8_scaled_cast(x, scale, f8);
        CHECK(r.data.dtype() == f8);
        CHECK(r.data.is_contiguous());
        CHECK(r.data_t.is_contiguous());
        CHECK(bitwise_equal(r.data, expected));
        CHECK(bitwise_equal(r.data_t, expected.t().contiguous()));
        const float want = max_abs_non_nan(x);
        CHECK(amax.item<float>() == want);
        if (rows * cols > 1) CHECK(std::isinf(want));  // every case but 1 x 1 holds an infinity
      }
    }
  }
}

TEST_CASE("amp: fp8_cast_transpose: amax folds into its slot, either layout alone, any input layout") {
  const Tensor x = clamp(awkward(40, 24, kFloat32, 5), -300.0, 300.0);  // NaN kept, infinities gone
  const Tensor scale = full({1}, 0.5);
  const float m = max_abs_non_nan(x);
  REQUIRE(m == 300.0f);
  // The slot is one element of a larger tensor: its neighbours stay; a larger value there stays.
  Tensor history = tensor(std::vector<float>{7.0f, 1.0f, 500.0f, 9.0f});
  (void)amp::fp8_cast_transpose(x, scale, kFloat8E4M3, history.narrow(0, 1, 1));
  (void)amp::fp8_cast_transpose(x, scale, kFloat8E4M3, history.narrow(0, 2, 1));
  CHECK(history.to_vector<float>() == std::vector<float>{7.0f, 300.0f, 500.0f, 9.0f});

  Tensor amax = zeros({1});
  const amp::Fp8Operand rows_only = amp::fp8_cast_transpose(x, scale, kFloat8E5M2, amax, true, false);
  const amp::Fp8Operand cols_only = amp::fp8_cast_transpose(x, scale, kFloat8E5M2, amax, false, true);
  CHECK(!rows_only.data_t.defined());
  CHECK(!cols_only.data.defined());
  CHECK(bitwise_equal(cols_only.data_t, rows_only.data.t().contiguous()));
  // A transposed view casts as its contiguous copy.
  const Tensor xt = x.t().contiguous().t();
  REQUIRE(!xt.is_contiguous());
  CHECK(bitwise_equal(amp::fp8_cast_transpose(xt, scale, kFloat8E5M2, amax).data, rows_only.data));
  // All-NaN leaves the amax as it was.
  Tensor amax2 = full({1}, 2.0);
  (void)amp::fp8_cast_transpose(full({2, 2}, NAN), scale, kFloat8E4M3, amax2);
  CHECK(amax2.item<float>() == 2.0f);
}

TEST_CASE("amp: fp8_cast_transpose: bad input is refused by name") {
  const Tensor x = randn({4, 4}), s = ones({1}), a = zeros({1});
  check_error([&] { (void)amp::fp8_cast_transpose(randn({4}), s, kFloat8E4M3, a); }, {"[fp8_cast_transpose]", "2-d"});
  check_error(
      [&] {
        (void)amp::fp8_cast_transpose(ones({2, 2}, kInt64), s, kFloat8E4M3, a);
      },
      {"[fp8_cast_transpose]", "floating"});
  check_error([&] { (void)amp::fp8_cast_transpose(x, s, kBFloat16, a); }, {"[fp8_cast_transpose]", "bfloat16"});
  check_error([&] { (void)amp::fp8_cast_transpose(x, ones({2}), kFloat8E4M3, a); }, {"[fp8_cast_transpose]", "scale"});
  check_error([&] { (void)amp::fp8_cast_transpose(x, s, kFloat8E4M3, zeros({1}, kFloat64)); },
              {"[fp8_cast_transpose]", "amax"});
  check_error([&] { (void)amp::fp8_cast_transpose(x, s, kFloat8E4M3, a, false, false); },
              {"[fp8_cast_transpose]", "neither"});
}

TEST_CASE("amp: fp8_gemm on the CPU: the emulation, equal to float64 sums of the decoded operands") {
  CHECK(!amp::fp8_gemm_available(kCPU));
  manual_seed(3);
  const int64_t m = 32, n = 48, k = 64;
  for (auto [da, db] : {std::pair{kFloat8E4M3, kFloat8E4M3}, {kFloat8E5M2, kFloat8E4M3}, {kFloat8E4M3, kFloat8E5M2}}) {
    const Tensor a8 = (randn({m, k}) * 20.0).to(da), b8 = (randn({n, k}) * 20.0).to(db);
    const Tensor inv_a = full({1}, 0.125), inv_b = full({1}, 0.75);
    const Tensor got = amp::fp8_gemm(a8, b8, inv_a, inv_b, kFloat32);
    CHECK(bitwise_equal(got, amp::fp8_gemm_emulated(a8, b8, inv_a, inv_b, kFloat32)));
    const std::vector<double> av = a8.to(kFloat64).to_vector<double>(), bv = b8.to(kFloat64).to_vector<double>();
    std::vector<double> ref(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += av[static_cast<size_t>(i * k + p)] * bv[static_cast<size_t>(j * k + p)];
        ref[static_cast<size_t>(i * n + j)] = s * 0.125 * 0.75;
      }
    hg::test::check_close(got, tensor(ref).reshape({m, n}).to(kFloat32), {1e-3, 1e-5});
    CHECK(amp::fp8_gemm(a8, b8, inv_a, inv_b, kBFloat16).dtype() == kBFloat16);
  }
  const Tensor e4 = ones({16, 16}).to(kFloat8E4M3), e5 = ones({16, 16}).to(kFloat8E5M2), one = ones({1});
  check_error([&] { (void)amp::fp8_gemm(e5, e5, one, one, kFloat32); }, {"[fp8_gemm]", "E5M2"});
  check_error(
      [&] {
        (void)amp::fp8_gemm(e4, ones({16, 32}).to(kFloat8E4M3), one, one, kFloat32);
      },
      {"[fp8_gemm]", "[m, k]"});
  check_error([&] { (void)amp::fp8_gemm(e4, ones({16, 16}), one, one, kFloat32); }, {"[fp8_gemm]", "fp8"});
  check_error([&] { (void)amp::fp8_gemm(e4, e4, one, one, kFloat8E4M3); }, {"[fp8_gemm]", "output"});
  check_error([&] { (void)amp::fp8_gemm(e4, e4, ones({1}, kBFloat16), one, kFloat32); }, {"[fp8_gemm]", "a_descale"});
}
