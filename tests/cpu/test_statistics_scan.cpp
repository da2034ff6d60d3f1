// var/std/norm, cumsum, tril/triu, chunk/split/repeat/flip and clamp with tensor bounds: float64
// references computed here, values from PyTorch 2.x (Debian python3-torch, printed with
// .tolist() from the same inputs), gradchecks and error messages.
#include <cmath>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;
using hg::test::Tolerance;

namespace {
constexpr Dtype kStatDtypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

// The [[1, -2, 3, 0.5], [4, 5, -6, 2]] input of the PyTorch values below.
Tensor torch_input() { return tensor(std::vector<double>{1, -2, 3, 0.5, 4, 5, -6, 2}, {2, 4}); }

// Per-row variance of a [rows, n] float64 tensor with `correction`.
std::vector<double> var_rows(const Tensor& t, double correction) {
  const auto v = t.to_vector<double>();
  const int64_t rows = t.size(0), n = t.size(1);
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i) m += v[r * n + i];
    m /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) ss += (v[r * n + i] - m) * (v[r * n + i] - m);
    out.push_back(ss / (static_cast<double>(n) - correction));
  }
  return out;
}
}  // namespace

TEST_CASE("var and std: PyTorch's values, every float dtype, dims, keepdim, correction, empty") {
  const Tensor x = torch_input();
  // torch: x.var(1), x.var(0, unbiased=False), x.var(), torch.var(x, 1, correction=2), x.std(1)
  check_close(var(x, {1}), tensor(std::vector<double>{4.229166666666667, 24.916666666666668}));
  check_close(var(x, {0}, false), tensor(std::vector<double>{2.25, 12.25, 20.25, 0.5625}));
  CHECK(var(x).item<double>() == doctest::Approx(12.602678571428571).epsilon(1e-14));
  check_close(var(x, {1}, 2.0), tensor(std::vector<double>{6.34375, 37.375}));
  check_close(hg::std(x, {1}), tensor(std::vector<double>{2.056493779875511, 4.9916597106239795}));
  check_close(x.std({1}, true, true), tensor(std::vector<double>{2.056493779875511, 4.9916597106239795}, {2, 1}));
  manual_seed(31);
  const Tensor x64 = randn({3, 5, 7}, kFloat64) * 3.0 + 1.0;
  for (Dtype d : kStatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor xd = x64.to(d), xr = xd.to(kFloat64);
    // Dims {0, 2} moved last: a [5, 21] layout for the reference.
    const Tensor rows = xr.permute({1, 0, 2}).contiguous().reshape({5, 21});
    const Tensor v = var(xd, {0, 2}, true, true);
    CHECK(v.shape() == Shape{1, 5, 1});
    CHECK(v.dtype() == d);
    check_close(v.reshape({5}).to(kFloat64), tensor(var_rows(rows, 1.0)), hg::test::tolerance(d));
    check_close(var(non_contiguous(xd.reshape({15, 7})), {-1}, 0.0).to(kFloat64),
                tensor(var_rows(xr.reshape({15, 7}), 0.0)), hg::test::tolerance(d));
    check_close(hg::std(xd, {-1}, false).reshape({15}).to(kFloat64), sqrt(tensor(var_rows(xr.reshape({15, 7}), 0.0))),
                hg::test::tolerance(d));
  }
  // One element with correction 1, and no elements: NaN, as PyTorch.
  CHECK(std::isnan(var(ones({1})).item<float>()));
  CHECK(std::isnan(var(zeros({0, 3}), {0}).to_vector<float>()[2]));
  CHECK(var(zeros({0, 3}), {1}).shape() == Shape{0});
}

TEST_CASE("var and std gradients, and bad input") {
  manual_seed(32);
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return var(t[0], {1}); }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& t) { return var(t[0], {0, 2}, 0.0, true); }, {randn({3, 2, 4})}));
  CHECK(gradcheck([](const TensorList& t) { return var(t[0]); }, {randn({5})}));
  CHECK(gradcheck([](const TensorList& t) { return hg::std(t[0], {-1}, true, false); }, {randn({2, 6})}));
  check_error([] { var(arange(int64_t{4})); }, {"[var]", "floating-point", "int64"});
  check_error([] { var(zeros({2, 3}), std::vector<int64_t>{2}); }, {"[var]", "dim"});
  check_error([] { var(zeros({2, 3}), {1, -1}); }, {"[var]", "more than once"});
  check_error([] { hg::std(arange(int64_t{3})); }, {"[var]", "int64"});
}

TEST_CASE("norm: p = 1, 2, infinity; PyTorch's values, dtypes, gradients, zero norm, bad p") {
  const Tensor x = torch_input();
  // torch: x.norm(2, 1), x.norm(1), x.norm(float('inf'), 1)
  check_close(norm(x, 2.0, {1}), tensor(std::vector<double>{3.774917217635375, 9.0}));
  CHECK(norm(x, 1.0).item<double>() == 23.5);
  check_close(x.norm(INFINITY, {1}, true), tensor(std::vector<double>{3.0, 6.0}, {2, 1}));
  CHECK(x.norm().item<double>() == doctest::Approx(std::sqrt(95.25)).epsilon(1e-14));
  manual_seed(33);
  const Tensor x64 = randn({4, 9}, kFloat64);
  for (Dtype d : kStatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor xd = non_contiguous(x64.to(d)), xr = xd.to(kFloat64);
    check_close(norm(xd, 2.0, {1}).to(kFloat64), sqrt(sum(xr * xr, {1})), hg::test::tolerance(d));
    check_close(norm(xd, 1.0, {0}).to(kFloat64), sum(abs(xr), {0}), hg::test::tolerance(d));
    check_close(norm(xd, INFINITY, {1}).to(kFloat64), max(abs(xr), 1).first, hg::test::tolerance(d));
    CHECK(norm(xd).dtype() == d);
  }
  using autograd::gradcheck;
  for (double p : {1.0, 2.0, double(INFINITY)}) {
    CAPTURE(p);
    CHECK(gradcheck([p](const TensorList& t) { return norm(t[0], p, {1}); }, {randn({3, 5})}));
    CHECK(gradcheck([p](const TensorList& t) { return norm(t[0], p); }, {randn({4})}));
    // A zero norm has a zero gradient (not NaN).
    Tensor z = zeros({3}, kFloat64).requires_grad_();
    norm(z, p).backward();
    CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  }
  CHECK(norm(zeros({0}), 2.0).item<float>() == 0.0f);
  check_error([] { norm(ones({3}), 3.0); }, {"[norm]", "p must be 1, 2 or INFINITY", "3"});
  check_error([] { norm(arange(int64_t{3})); }, {"[norm]", "int64"});
}

TEST_CASE("norm of long rows: chunked across threads, the same value, NaN and infinity in any chunk") {
  manual_seed(35);
  // 200,003 values: four chunks of the kernel's split plus a ragged end, in rows of two.
  const Tensor x64 = randn({2, 200003}, kFloat64);
  for (Dtype d : {kFloat32, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor xd = x64.to(d), xr = xd.to(kFloat64);
    const Tolerance tol = d == kFloat64 ? Tolerance{1e-12, 1e-12} : Tolerance{1e-6, 1e-6};
    check_close(norm(xd, 2.0, {1}).to(kFloat64), sqrt(sum(xr * xr, {1})).to(d).to(kFloat64), tol);
    check_close(norm(xd, 1.0).to(kFloat64), sum(abs(xr)).to(d).to(kFloat64), tol);
    check_close(norm(xd, INFINITY, {1}).to(kFloat64), max(abs(xr), 1).first.to(d).to(kFloat64), {0, 0});
  }
  for (double bad : {double(NAN), double(INFINITY)}) {
    CAPTURE(bad);
    std::vector<float> v(200003, 1.0f);
    v[150001] = static_cast<float>(bad);  // in the third chunk, after finite chunks
    const Tensor t = tensor(v);
    for (double p : {1.0, 2.0, double(INFINITY)}) {
      const double got = norm(t, p).item<double>();
      if (std::isnan(bad))
        CHECK(std::isnan(got));
      else
        CHECK(got == INFINITY);
    }
  }
}

TEST_CASE("cumsum: PyTorch's values, dims, dtypes, integers into int64, gradient") {
  // torch: x.cumsum(1)
  check_close(cumsum(torch_input(), 1), tensor(std::vector<double>{1, -1, 2, 2.5, 4, 9, 3, 5}, {2, 4}));
  manual_seed(34);
  const Tensor x64 = randn({3, 6, 5}, kFloat64);
  for (Dtype d : kStatDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor xd = x64.to(d), xr = xd.to(kFloat64);
    for (int64_t dim : {0, 1, -1}) {
      CAPTURE(dim);
      // Reference: each prefix summed along dim.
      const int64_t dd = dim < 0 ? dim + 3 : dim;
      std::vector<Tensor> prefixes;
      for (int64_t i = 0; i < xr.size(dd); ++i) prefixes.push_back(sum(xr.narrow(dd, 0, i + 1), {dd}));
      const Tensor expected = stack(prefixes, dd);
      const Tensor got = cumsum(dim == 1 ? non_contiguous(xd.reshape({18, 5})).reshape({3, 6, 5}) : xd, dim);
      CHECK(got.dtype() == d);
      // 16-bit: each output is one rounding of a float64 running sum.
      check_close(got.to(kFloat64), expected.to(d).to(kFloat64), hg::test::tolerance(d));
    }
  }
  const Tensor i = cumsum(tensor(std::vector<int32_t>{1, 2, 3}), 0);
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6});
  CHECK(cumsum(tensor(std::vector<bool>{true, false, true}), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 2});
  CHECK(cumsum(tensor(std::vector<int64_t>{1, 2}), 0, kFloat64).dtype() == kFloat64);
  CHECK(cumsum(scalar_tensor(2.5), 0).item<float>() == 2.5f);
  CHECK(cumsum(zeros({2, 0}), 1).shape() == Shape{2, 0});
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return cumsum(t[0], 1); }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& t) { return cumsum(t[0], 0); }, {randn({5})}));
  check_error([] { cumsum(ones({2, 3}), 2); }, {"[cumsum]", "dim"});
  check_error([] { cumsum(ones({2}), 0, kBool); }, {"[cumsum]", "bool"});
}

TEST_CASE("tril and triu: PyTorch's values, batches, bool masks, gradient") {
  const Tensor a = arange(0.0, 12.0, 1.0, kFloat32).reshape({3, 4});
  // torch: torch.tril(torch.arange(12.).reshape(3, 4), -1), torch.triu(..., 1)
  CHECK(tril(a, -1).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0});
  CHECK(a.triu(1).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 0, 0, 6, 7, 0, 0, 0, 11});
  CHECK((tril(a) + triu(a, 1)).to_vector<float>() == a.to_vector<float>());
  CHECK(tril(a, 5).to_vector<float>() == a.to_vector<float>());
  CHECK(triu(a, -7).to_vector<float>() == a.to_vector<float>());
  for (Dtype d : kStatDtypes) {
    const Tensor b = randn({2, 3, 4, 5}).to(d), bt = b.transpose(-1, -2);  // batched, non-contiguous
    const Tensor lower = tril(bt, 1);
    CHECK(lower.dtype() == d);
    const auto v = lower.to_vector<double>(), src = bt.contiguous().to_vector<double>();
    for (int64_t k = 0; k < 6; ++k)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          const size_t at = static_cast<size_t>((k * 5 + i) * 4 + j);
          CHECK(v[at] == (j - i <= 1 ? src[at] : 0.0));
        }
  }
  const Tensor mask = tril(ones({3, 3}, kBool));
  CHECK(mask.dtype() == kBool);
  CHECK(mask.to_vector<bool>() == std::vector<bool>{true, false, false, true, true, false, true, true, true});
  CHECK(tril(zeros({0, 3})).shape() == Shape{0, 3});
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return tril(t[0]); }, {randn({3, 4})}));
  CHECK(gradcheck([](const TensorList& t) { return triu(t[0], -1); }, {randn({2, 3, 3})}));
  check_error([] { tril(ones({3})); }, {"[tril]", "at least 2 dims", "[3]"});
  check_error([] { triu(scalar_tensor(1.0)); }, {"[triu]", "at least 2 dims"});
}

TEST_CASE("chunk and split: views of the input, PyTorch's piece sizes, gradient") {
  const Tensor x = arange(0.0, 10.0, 1.0, kFloat32).reshape({5, 2});
  auto sizes = [](const std::vector<Tensor>& pieces, int64_t dim) {
    std::vector<int64_t> s;
    for (const Tensor& p : pieces) s.push_back(p.size(dim));
    return s;
  };
  // torch: torch.zeros(5).chunk(3) -> sizes [2, 2, 1]; torch.zeros(6).chunk(4) -> [2, 2, 2]; torch.zeros(0).chunk(3) ->
  // 3 empty
  CHECK(sizes(chunk(x, 3), 0) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes(zeros({6}).chunk(4), 0) == std::vector<int64_t>{2, 2, 2});
  CHECK(sizes(chunk(zeros({0}), 3), 0) == std::vector<int64_t>{0, 0, 0});
  CHECK(sizes(split(x, 2), 0) == std::vector<int64_t>{2, 2, 1});
  CHECK(sizes(x.split(std::vector<int64_t>{1, 4}), 0) == std::vector<int64_t>{1, 4});
  CHECK(sizes(split_with_sizes(x, {2}, 1), 1) == std::vector<int64_t>{2});
  CHECK(sizes(split(zeros({0, 2}), 3), 0) == std::vector<int64_t>{0});
  const auto pieces = chunk(x, 2, 1);
  CHECK(pieces[1].to_vector<float>() == std::vector<float>{1, 3, 5, 7, 9});
  CHECK(pieces[1].storage() == x.storage());  // a view
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return chunk(t[0], 3, 1)[1] * 2.0 + chunk(t[0], 3, 1)[2].sum(); },
                  {randn({2, 6})}));
  CHECK(gradcheck([](const TensorList& t) { return split(t[0], std::vector<int64_t>{1, 3}, 0)[1]; }, {randn({4, 2})}));
  check_error([] { chunk(ones({3}), 0); }, {"[chunk]", "positive"});
  check_error([] { split(ones({3}), 0); }, {"[split]", "positive"});
  check_error([] { split(ones({3, 2}), std::vector<int64_t>{1, 1}); }, {"[split]", "add up to 2", "size 3"});
  check_error([] { split(ones({3}), 1, 1); }, {"[split]", "dim"});
}

TEST_CASE("repeat and flip: PyTorch's values, dtypes, non-contiguous input, gradient") {
  // torch: torch.tensor([[1, 2]]).repeat(2, 1, 2)
  const Tensor r = repeat(tensor(std::vector<int64_t>{1, 2}, {1, 2}), {2, 1, 2});
  CHECK(r.shape() == Shape{2, 1, 4});
  CHECK(r.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1, 2});
  const Tensor m = arange(0.0, 6.0, 1.0, kFloat64).reshape({2, 3});
  CHECK(m.t().repeat({2, 1}).to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5});
  CHECK(repeat(m, {0, 2}).shape() == Shape{0, 6});
  CHECK(m.flip({1}).to_vector<double>() == std::vector<double>{2, 1, 0, 5, 4, 3});
  CHECK(flip(m, {0, -1}).to_vector<double>() == std::vector<double>{5, 4, 3, 2, 1, 0});
  CHECK(flip(m.t(), {0}).to_vector<double>() == std::vector<double>{2, 5, 1, 4, 0, 3});
  CHECK(flip(m, {}).to_vector<double>() == m.to_vector<double>());
  CHECK(flip(zeros({0, 2}), {0}).shape() == Shape{0, 2});
  for (Dtype d : kStatDtypes)
    CHECK(flip(m.to(d), {1}).to(kFloat64).to_vector<double>() == m.flip({1}).to_vector<double>());
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return repeat(t[0], {2, 3}); }, {randn({2, 2})}));
  CHECK(gradcheck([](const TensorList& t) { return repeat(t[0], {3, 1, 2}); }, {randn({4})}));
  CHECK(gradcheck([](const TensorList& t) { return flip(t[0], {0, 2}); }, {randn({2, 3, 2})}));
  check_error([] { repeat(ones({2, 2}), {2}); }, {"[repeat]", "1 repeats", "2 dims"});
  check_error([] { repeat(ones({2}), {-1}); }, {"[repeat]", "non-negative"});
  check_error([] { flip(ones({2, 2}), {0, -2}); }, {"[flip]", "more than once"});
  check_error([] { flip(ones({2}), {1}); }, {"[flip]", "dim"});
}

TEST_CASE("clamp with tensor bounds: broadcasting, promotion, gradients to x and the bounds") {
  const Tensor x = tensor(std::vector<float>{-3, -1, 0, 2, 5, NAN});
  const Tensor lo = tensor(std::vector<float>{-2, 0, -1, -1, 0, 0});
  const Tensor hi = full({1}, 3.0);
  // torch: torch.clamp(x, lo, hi) with the same values
  const auto got = clamp(x, lo, hi).to_vector<float>();
  const std::vector<float> want{-2, 0, 0, 2, 3, NAN};
  for (size_t i = 0; i < 5; ++i) CHECK(got[i] == want[i]);
  CHECK(std::isnan(got[5]));
  CHECK(x.clamp(Tensor(), hi).to_vector<float>()[4] == 3.0f);
  CHECK(clamp(x, lo, Tensor()).to_vector<float>()[0] == -2.0f);
  // Broadcasting: a [3, 1] min against a [4] x gives [3, 4]; float64 bounds promote.
  const Tensor b = clamp(arange(0.0, 4.0, 1.0, kFloat32), tensor(std::vector<double>{0, 1, 2}, {3, 1}), Tensor());
  CHECK(b.shape() == Shape{3, 4});
  CHECK(b.dtype() == kFloat64);
  CHECK(b.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 1, 1, 2, 3, 2, 2, 2, 3});
  using autograd::gradcheck;
  manual_seed(35);
  // Values 0.1 apart at least, so no finite difference straddles a bound.
  const Tensor xs = tensor(std::vector<double>{-2.0, -0.5, 0.3, 1.4, 2.6, 0.9}, {2, 3});
  const Tensor los = tensor(std::vector<double>{-1.0, 0.0, -1.0}, {1, 3});
  const Tensor his = tensor(std::vector<double>{2.0, 1.0}, {2, 1});
  CHECK(gradcheck([](const TensorList& t) { return clamp(t[0], t[1], t[2]); }, {xs, los, his}));
  check_error([] { clamp(ones({2}), Tensor(), Tensor()); }, {"[clamp]", "at least one"});
  check_error([] { clamp(ones({2}), ones({3}), Tensor()); }, {"[clamp]", "[2]", "[3]"});
  check_error([] { clamp(ones({2}), ones({2}, kBool), Tensor()); }, {"[clamp]", "bool"});
}
