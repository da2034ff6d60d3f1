// Tensor::index / index_put_ in libtorch's style: PyTorch's results for the same indices
// (Debian python3-torch, printed with .tolist()), views vs copies, gradients and errors.
#include "helpers.h"

using namespace hg;
using namespace hg::indexing;
using hg::test::check_error;

namespace {
Tensor x24() { return arange(0.0, 24.0, 1.0, kFloat32).reshape({2, 3, 4}); }
std::vector<float> flat_values(const Tensor& t) { return t.contiguous().to_vector<float>(); }
}  // namespace

TEST_CASE("index: integers, slices, None and Ellipsis give PyTorch's views") {
  const Tensor x = x24();
  // torch: x[1, ::2, None, -1] -> [[15.0], [23.0]]
  const Tensor a = x.index({1, Slice(None, None, 2), None, -1});
  CHECK(a.shape() == Shape{2, 1});
  CHECK(flat_values(a) == std::vector<float>{15, 23});
  CHECK(a.storage() == x.storage());  // basic indexing is a view
  CHECK(x.index({"...", Slice(1, 3)}).shape() == Shape{2, 3, 2});
  CHECK(x.index({Ellipsis, 0}).shape() == Shape{2, 3});
  CHECK(x.index({Slice(), 2, Slice(-2, None)}).shape() == Shape{2, 2});
  CHECK(flat_values(x.index({0, 1})) == std::vector<float>{4, 5, 6, 7});
  CHECK(x.index({}).shape() == x.shape());
  CHECK(x.index({Slice(5, 9)}).shape() == Shape{0, 3, 4});  // out-of-range slices clamp, as Python's
  CHECK(index(x, {None, None}).shape() == Shape{1, 1, 2, 3, 4});
}

TEST_CASE("index with one tensor: int64 indices of any shape, negative ones, bool masks") {
  const Tensor x = x24();
  // torch: x[:, torch.tensor([[2, 0], [1, 1]])] -> shape [2, 2, 2, 4]
  const Tensor i = tensor(std::vector<int64_t>{2, 0, 1, 1}, {2, 2});
  const Tensor a = x.index({Slice(), i});
  CHECK(a.shape() == Shape{2, 2, 2, 4});
  CHECK(flat_values(a) == std::vector<float>{8,  9,  10, 11, 0,  1,  2,  3,  4,  5,  6,  7,  4,  5,  6,  7,
                                             20, 21, 22, 23, 12, 13, 14, 15, 16, 17, 18, 19, 16, 17, 18, 19});
  // torch: x[0, :, torch.tensor([-1, 0])] -> [[3, 0], [7, 4], [11, 8]]
  CHECK(flat_values(x.index({0, Slice(), tensor(std::vector<int64_t>{-1, 0})})) ==
        std::vector<float>{3, 0, 7, 4, 11, 8});
  // torch: m = x[0] > 5; x[1][m] -> [18, ..., 23]; x[:, m].shape -> [2, 6]
  const Tensor m = x.index({0}) > 5.0;
  CHECK(flat_values(x.index({1}).index({m})) == std::vector<float>{18, 19, 20, 21, 22, 23});
  CHECK(x.index({Slice(), m}).shape() == Shape{2, 6});
  CHECK(x.index({tensor(std::vector<int32_t>{1})}).shape() == Shape{1, 3, 4});
  using autograd::gradcheck;
  CHECK(gradcheck(
      [&](const TensorList& t) {
        return t[0].index({Slice(), i, Slice(1, None, 2)});
      },
      {randn({2, 3, 4})}));
  CHECK(gradcheck([&](const TensorList& t) { return t[0].index({1, m}); }, {randn({2, 3, 4})}));
}

TEST_CASE("index_put_: basic views, int64 and bool tensor indices, broadcast values") {
  Tensor y = x24();
  // torch: y[0, 1:] = tensor([7, 8, 9, 10]); y[1, :, tensor([0, 3])] = -1; y[y > 20] = 0
  y.index_put_({0, Slice(1, None)}, tensor(std::vector<float>{7, 8, 9, 10}));
  y.index_put_({1, Slice(), tensor(std::vector<int64_t>{0, 3})}, -1.0);
  y.index_put_({y > 20.0}, 0.0);
  CHECK(flat_values(y) ==
        std::vector<float>{0, 1, 2, 3, 7, 8, 9, 10, 7, 8, 9, 10, -1, 13, 14, -1, -1, 17, 18, -1, -1, 0, 0, -1});
  // Per-position values, and a value converted to the tensor's dtype.
  Tensor z = zeros({3, 2}, kFloat64);
  z.index_put_({tensor(std::vector<int64_t>{2, 0})}, tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  CHECK(z.to_vector<double>() == std::vector<double>{3, 4, 0, 0, 1, 2});
  Tensor w = zeros({2, 3});
  w.index_put_({Slice(), tensor(std::vector<bool>{true, false, true})}, tensor(std::vector<float>{5, 6}, {2, 1}));
  CHECK(flat_values(w) == std::vector<float>{5, 0, 5, 6, 0, 6});
  check_error([&] { w.index_put_({0}, ones({4})); }, {"[index_put_]", "[4]", "[3]"});
  check_error([&] { z.index_put_({tensor(std::vector<int64_t>{0})}, ones({3})); }, {"[index_put_]", "[3]", "[1, 2]"});
}

TEST_CASE("index: errors name the op and the shapes") {
  const Tensor x = x24();
  check_error([&] { x.index({0, 0, 0, 0}); }, {"[index]", "too many indices", "[2, 3, 4]"});
  check_error([&] { x.index({5}); }, {"[index]", "index 5 is out of range", "size 2"});
  check_error([&] { x.index({"...", Ellipsis}); }, {"[index]", "one Ellipsis"});
  check_error([&] { x.index({"..x"}); }, {"[index]", "\"...\""});
  check_error([&] { x.index({Slice(None, None, -1)}); }, {"[index]", "positive"});
  check_error([&] { x.index({ones({2})}); }, {"[index]", "integer or bool", "float32"});
  check_error([&] { x.index({arange(int64_t{2}), arange(int64_t{2})}); }, {"[index]", "only one tensor index"});
  check_error([&] { x.index({ones({3}, kBool)}); }, {"[index]", "does not match", "[3]"});
  check_error([&] { x.index({tensor(std::vector<int64_t>{7})}); }, {"index 7"});
}
