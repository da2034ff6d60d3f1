// Backward kernels read the incoming gradient through its strides. The gradient of `y.sum()`
// arrives expanded (every stride 0), a user's `grad_outputs` may be a transposed view: each must
// give the gradients of the same values laid out contiguously. (On 2026-11-25 layer_norm and
// batch_norm read an expanded gradient as if it were contiguous and returned garbage, on the CPU
// and on CUDA alike; the cuda suite found it on its first run on a GPU.)
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::non_contiguous;

namespace {
using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

// Gradients of f's inputs for the incoming gradient g.
Inputs grads_for(const Fn& f, const Inputs& in, const Tensor& g) {
  Inputs xs;
  for (const Tensor& t : in) xs.push_back(t.is_floating_point() ? t.detach().requires_grad_() : t);
  const Tensor y = f(xs);
  REQUIRE(y.shape() == g.shape());
  Inputs leaves;
  for (const Tensor& x : xs)
    if (x.requires_grad()) leaves.push_back(x);
  return autograd::grad({y}, leaves, {g});
}

// An incoming gradient with every element equal along dimension 0 (one row, expanded), and one
// that is dense but transposed: both checked against their contiguous copies.
void check_strided_grads(const std::string& what, const Fn& f, const Inputs& in) {
  CAPTURE(what);
  Shape shape;
  {
    NoGradGuard no_grad;
    shape = f(in).shape();
  }
  REQUIRE(!shape.empty());
  const Dtype dtype = in[0].dtype();
  Shape one_row = shape;
  one_row[0] = 1;
  const Tensor expanded = randn(one_row).to(dtype).expand(shape);
  const Tensor broadcast_scalar = full({}, 0.75, TensorOptions(dtype)).expand(shape);
  const Tensor transposed = non_contiguous(randn(shape).to(dtype));
  for (const Tensor& g : {expanded, broadcast_scalar, transposed}) {
    REQUIRE(!g.is_contiguous());
    const Inputs strided = grads_for(f, in, g);
    const Inputs dense = grads_for(f, in, g.contiguous());
    REQUIRE(strided.size() == dense.size());
    for (size_t i = 0; i < dense.size(); ++i) {
      CAPTURE(i);
      check_close(strided[i].to(kFloat64), dense[i].to(kFloat64), {1e-6, 1e-6});
    }
  }
}
}  // namespace

TEST_CASE("backward ops read expanded and transposed incoming gradients through their strides") {
  manual_seed(5);
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    const auto r = [d](const Shape& s) { return randn(s).to(d); };
    const Tensor x4 = r({4, 6, 3, 3}), x2 = r({5, 8});
    check_strided_grads("layer_norm",
                        [](const Inputs& v) {
                          return layer_norm(v[0], {3, 3}, v[1], v[2]);
                        },
                        {x4, r({3, 3}), r({3, 3})});
    check_strided_grads("batch_norm (train)",
                        [](const Inputs& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
                        {x4, r({6}), r({6})});
    const Tensor rm = randn({6}), rv = rand({6}) + 0.5;
    check_strided_grads("batch_norm (eval)",
                        [&](const Inputs& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); },
                        {x4, r({6}), r({6})});
    check_strided_grads("group_norm", [](const Inputs& v) { return group_norm(v[0], 3, v[1], v[2]); },
                        {x4, r({6}), r({6})});
    check_strided_grads("softmax", [](const Inputs& v) { return softmax(v[0], 1); }, {x2});
    check_strided_grads("log_softmax", [](const Inputs& v) { return log_softmax(v[0], 0); }, {x2});
    check_strided_grads("linear", [](const Inputs& v) { return linear(v[0], v[1], v[2]); }, {x2, r({7, 8}), r({7})});
    check_strided_grads("matmul", [](const Inputs& v) { return matmul(v[0], v[1]); }, {r({2, 5, 8}), r({8, 3})});
    check_strided_grads("conv2d", [](const Inputs& v) { return conv2d(v[0], v[1], v[2], {1}, {1}); },
                        {r({2, 4, 7, 6}), r({5, 4, 3, 3}), r({5})});
    check_strided_grads("conv2d_relu", [](const Inputs& v) { return conv2d_relu(v[0], v[1], v[2], {1}, {1}); },
                        {r({2, 4, 7, 6}), r({5, 4, 3, 3}), r({5})});
    const Tensor image = r({2, 3, 8, 7});
    check_strided_grads("max_pool2d", [](const Inputs& v) { return max_pool2d(v[0], {2}); }, {image});
    check_strided_grads("avg_pool2d", [](const Inputs& v) { return avg_pool2d(v[0], {3}, {2}, {1}); }, {image});
    check_strided_grads("attention",
                        [](const Inputs& v) { return scaled_dot_product_attention(v[0], v[1], v[2], {}, 0.0, true); },
                        {r({2, 3, 5, 4}), r({2, 3, 5, 4}), r({2, 3, 5, 6})});
    check_strided_grads("gelu", [](const Inputs& v) { return gelu(v[0]); }, {x2});
    check_strided_grads("relu", [](const Inputs& v) { return relu(v[0]); }, {x2});
    check_strided_grads("tanh", [](const Inputs& v) { return tanh(v[0]); }, {x2});
    check_strided_grads("cumsum", [](const Inputs& v) { return cumsum(v[0], 1); }, {x2});
    check_strided_grads("sort", [](const Inputs& v) { return std::get<0>(sort(v[0], 1)); }, {x2});
    check_strided_grads("var", [](const Inputs& v) { return var(v[0], {1}); }, {x2});
    check_strided_grads("embedding", [](const Inputs& v) { return embedding(v[0], v[1]); },
                        {r({10, 4}), randint(0, 10, {3, 5})});
    check_strided_grads("cross_entropy (none)",
                        [](const Inputs& v) { return cross_entropy(v[0], v[1], Reduction::None); },
                        {x2, randint(0, 8, {5})});
  }
}
