// sort/argsort/topk, one_hot and multinomial: PyTorch's values (Debian python3-torch, printed
// from the same inputs), references computed here, gradients, sampling frequencies and errors.
#include <cmath>
#include <map>
#include <set>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::non_contiguous;

namespace {
constexpr Dtype kSortDtypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};
Tensor tie_rows() { return tensor(std::vector<float>{0.5, 2, -1, 2, 7, 3, 3, 3, -4, 0}, {2, 5}); }
}  // namespace

TEST_CASE("sort and argsort: PyTorch's values and indices, stable ties, NaN last, dims") {
  // torch: x.sort(1), x.sort(0, descending=True), x.argsort(1, descending=True)
  auto [v, i] = sort(tie_rows(), 1);
  CHECK(v.to_vector<float>() == std::vector<float>{-1, 0.5, 2, 2, 7, -4, 0, 3, 3, 3});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1, 3, 4, 3, 4, 0, 1, 2});
  auto [v0, i0] = tie_rows().sort(0, true);
  CHECK(v0.to_vector<float>() == std::vector<float>{3, 3, 3, 2, 7, 0.5, 2, -1, -4, 0});
  CHECK(i0.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 0, 0, 0, 0, 0, 1, 1});
  CHECK(argsort(tie_rows(), 1, true).to_vector<int64_t>() == std::vector<int64_t>{4, 1, 3, 0, 2, 0, 1, 2, 4, 3});
  // torch: torch.tensor([3., nan, 1., 3., -1.]).sort() and .sort(descending=True)
  const Tensor n = tensor(std::vector<float>{3, NAN, 1, 3, -1});
  CHECK(sort(n).second.to_vector<int64_t>() == std::vector<int64_t>{4, 2, 0, 3, 1});
  CHECK(sort(n, 0, true).second.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 3, 2, 4});
  manual_seed(41);
  const Tensor x64 = randn({4, 6, 3}, kFloat64);
  for (Dtype d : kSortDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor xd = non_contiguous(x64.to(d).reshape({24, 3})).reshape({4, 6, 3});
    auto [sv, si] = sort(xd, 1, true);
    CHECK(sv.dtype() == d);
    CHECK(si.dtype() == kInt64);
    CHECK(sv.shape() == Shape{4, 6, 3});
    // The values are the input gathered at the indices, in non-increasing order.
    CHECK(gather(xd, 1, si).to_vector<double>() == sv.to_vector<double>());
    const auto s = sv.to_vector<double>();
    for (int64_t a = 0; a < 4; ++a)
      for (int64_t b = 0; b + 1 < 6; ++b)
        for (int64_t c = 0; c < 3; ++c) CHECK(s[(a * 6 + b) * 3 + c] >= s[(a * 6 + b + 1) * 3 + c]);
  }
  CHECK(sort(arange(int64_t{5}).flip({0})).first.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(sort(scalar_tensor(2.0)).second.item<int64_t>() == 0);
  CHECK(sort(zeros({3, 0}), 1).first.shape() == Shape{3, 0});
  CHECK(sort(zeros({0, 3}), 1).second.shape() == Shape{0, 3});
  check_error([] { sort(ones({2}), 1); }, {"[sort]", "dim"});
}

TEST_CASE("topk: PyTorch's values, smallest, k = 0 and k = n, gradient, errors") {
  // torch: x.topk(2, 1) on row 0 (row 1 has ties, whose order PyTorch leaves open: ours keeps
  // the lower index first), x.topk(2, 1, largest=False)
  auto [v, i] = topk(tie_rows(), 2, 1);
  CHECK(v.to_vector<float>() == std::vector<float>{7, 2, 3, 3});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{4, 1, 0, 1});
  auto [sv, si] = tie_rows().topk(2, 1, false);
  CHECK(sv.to_vector<float>() == std::vector<float>{-1, 0.5, -4, 0});
  CHECK(si.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 3, 4});
  // torch: torch.tensor([3., 1., 3., -1., 2.]).topk(3) -> [3, 3, 2], [0, 2, 4]
  auto [tv, ti] = topk(tensor(std::vector<float>{3, 1, 3, -1, 2}), 3);
  CHECK(tv.to_vector<float>() == std::vector<float>{3, 3, 2});
  CHECK(ti.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 4});
  manual_seed(42);
  for (Dtype d : kSortDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({5, 8}).to(d);
    auto [kv, ki] = topk(x.t(), 3, 0);
    CHECK(kv.shape() == Shape{3, 5});
    CHECK(kv.to_vector<double>() == sort(x.t(), 0, true).first.narrow(0, 0, 3).to_vector<double>());
    CHECK(ki.to_vector<int64_t>() == argsort(x.t(), 0, true).narrow(0, 0, 3).to_vector<int64_t>());
  }
  CHECK(topk(ones({2, 4}), 0).first.shape() == Shape{2, 0});
  CHECK(topk(ones({2, 4}), 4).first.shape() == Shape{2, 4});
  using autograd::gradcheck;
  CHECK(gradcheck([](const TensorList& t) { return topk(t[0], 2, 1).first; }, {randn({3, 5})}));
  CHECK(gradcheck([](const TensorList& t) { return topk(t[0], 3, 0, false).first; }, {randn({4, 2})}));
  CHECK(gradcheck([](const TensorList& t) { return sort(t[0], 0, true).first; }, {randn({5, 2})}));
  Tensor x = randn({4}).requires_grad_();
  auto [values, indices] = topk(x, 2);
  CHECK(values.requires_grad());
  CHECK_FALSE(indices.requires_grad());
  check_error([] { topk(ones({2, 3}), 4, 1); }, {"[topk]", "k (4)", "[2, 3]"});
  check_error([] { topk(ones({3}), -1); }, {"[topk]", "non-negative"});
}

TEST_CASE("one_hot: PyTorch's values, inferred and given num_classes, errors") {
  // torch: F.one_hot(torch.tensor([[0, 2], [1, 0]]))
  const Tensor h = one_hot(tensor(std::vector<int64_t>{0, 2, 1, 0}, {2, 2}));
  CHECK(h.shape() == Shape{2, 2, 3});
  CHECK(h.dtype() == kInt64);
  CHECK(h.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0});
  CHECK(one_hot(tensor(std::vector<int64_t>{1}), 4).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 0});
  CHECK(one_hot(zeros({0}, kInt64), 5).shape() == Shape{0, 5});
  CHECK_FALSE(one_hot(tensor(std::vector<int64_t>{1}), 4).requires_grad());
  check_error([] { one_hot(tensor(std::vector<int64_t>{3}), 3); }, {"[one_hot]", "3", "out of range"});
  check_error([] { one_hot(tensor(std::vector<int64_t>{-1}), 3); }, {"[one_hot]", "non-negative"});
  check_error([] { one_hot(ones({2})); }, {"[one_hot]", "int64", "float32"});
  check_error([] { one_hot(zeros({0}, kInt64)); }, {"[one_hot]", "empty"});
}

TEST_CASE("multinomial: seeded, frequencies match the weights, without replacement draws distinct classes") {
  const Tensor w = tensor(std::vector<double>{1, 0, 3, 6}).to(kFloat32);  // unnormalised
  manual_seed(43);
  const Tensor a = multinomial(w, 20000, true);
  manual_seed(43);
  CHECK(multinomial(w, 20000, true).to_vector<int64_t>() == a.to_vector<int64_t>());  // the seed decides
  CHECK(a.shape() == Shape{20000});
  CHECK(a.dtype() == kInt64);
  std::map<int64_t, int> counts;
  for (int64_t c : a.to_vector<int64_t>()) ++counts[c];
  CHECK(counts[1] == 0);
  // Binomial standard deviations are under 0.004 of 20000 draws; allow 4 of them.
  CHECK(counts[0] / 20000.0 == doctest::Approx(0.1).epsilon(0.16));
  CHECK(counts[2] / 20000.0 == doctest::Approx(0.3).epsilon(0.06));
  CHECK(counts[3] / 20000.0 == doctest::Approx(0.6).epsilon(0.03));
  for (Dtype d : kSortDtypes) {
    CAPTURE(dtype_name(d));
    // Without replacement, rows of a 2-d input: distinct classes, never a zero-weight one, and
    // the first draw follows the weights.
    const Tensor p = tensor(std::vector<double>{0.2, 0.0, 0.5, 0.3, 1, 1, 0, 1}, {2, 4}).to(d);
    std::map<int64_t, int> first;
    for (int rep = 0; rep < 3000; ++rep) {
      const auto s = multinomial(p, 3).to_vector<int64_t>();
      REQUIRE(s.size() == 6);
      CHECK(std::set<int64_t>(s.begin(), s.begin() + 3) == std::set<int64_t>{0, 2, 3});
      CHECK(std::set<int64_t>(s.begin() + 3, s.end()) == std::set<int64_t>{0, 1, 3});
      ++first[s[0]];
    }
    CHECK(first[2] / 3000.0 == doctest::Approx(0.5).epsilon(0.1));
  }
  CHECK(multinomial(zeros({0, 3}), 2, true).shape() == Shape{0, 2});
  CHECK(non_contiguous(ones({4})).multinomial(4).sort().first.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  check_error([] { multinomial(ones({3}), 4); }, {"[multinomial]", "4 samples without replacement", "3 categories"});
  check_error([] { multinomial(tensor(std::vector<float>{1, 0, 0}), 2); }, {"[multinomial]", "only 1 non-zero"});
  check_error([] { multinomial(tensor(std::vector<float>{1, -1}), 1); }, {"[multinomial]", "non-negative", "-1"});
  check_error([] { multinomial(tensor(std::vector<float>{1, NAN}), 1); }, {"[multinomial]", "finite"});
  check_error([] { multinomial(zeros({2, 2}), 1, true); }, {"[multinomial]", "positive sum"});
  check_error([] { multinomial(ones({2, 2, 2}), 1); }, {"[multinomial]", "1-d or 2-d", "[2, 2, 2]"});
  check_error([] { multinomial(arange(int64_t{3}), 1); }, {"[multinomial]", "floating"});
  check_error([] { multinomial(ones({3}), 0); }, {"[multinomial]", "positive"});
}
