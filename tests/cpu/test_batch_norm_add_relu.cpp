// batch_norm_add_relu: relu(batch_norm(x) + residual) as one op. On the CPU (no fused kernel) it is
// the reference the CUDA kernel is checked against (tests/cuda/test_channels_last.cpp): the same
// values as the three public ops, bit for bit, in both layouts.
#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_close;

TEST_CASE("batch_norm_add_relu: the values and gradients of relu(batch_norm(x) + residual)") {
  manual_seed(11);
  for (Dtype d : {kFloat32, kBFloat16}) {
    for (bool with_residual : {true, false}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        CAPTURE(dtype_name(d));
        CAPTURE(with_residual);
        CAPTURE(format == MemoryFormat::ChannelsLast);
        const Tensor x = randn({3, 4, 5, 5}).to(d).contiguous(format).requires_grad_();
        const Tensor r = with_residual ? randn({3, 4, 5, 5}).to(d).contiguous(format).requires_grad_() : Tensor();
        const Tensor w = randn({4}).to(d).requires_grad_(), b = randn({4}).to(d).requires_grad_();
        Tensor rm1 = zeros({4}), rv1 = ones({4}), rm2 = zeros({4}), rv2 = ones({4});
        const Tensor fused = batch_norm_add_relu(x, rm1, rv1, w, b, r, true);
        const Tensor bn = batch_norm(x, rm2, rv2, w, b, true);
        const Tensor ref = relu(with_residual ? bn + r : bn);
        CHECK(bitwise_equal(fused, ref));
        CHECK(fused.strides() == ref.strides());
        CHECK(bitwise_equal(rm1, rm2));
        CHECK(bitwise_equal(rv1, rv2));
        const Tensor g = randn(ref.shape()).to(d);
        TensorList in{x, w, b};
        if (with_residual) in.push_back(r);
        const auto got = autograd::grad({fused}, in, {g});
        const auto want = autograd::grad({ref}, in, {g});
        for (size_t i = 0; i < in.size(); ++i) {
          CAPTURE(i);
          check_close(got[i], want[i], {1e-6, 1e-6});
        }
      }
    }
  }
}

TEST_CASE("batch_norm_add_relu: gradcheck, gradgradcheck, and a residual of the wrong shape is refused") {
  manual_seed(12);
  CHECK(autograd::gradcheck(
      [](const TensorList& v) { return batch_norm_add_relu(v[0], Tensor(), Tensor(), v[1], v[2], v[3], true); },
      {randn({2, 3, 3, 3}), randn({3}), randn({3}), randn({2, 3, 3, 3})}));
  CHECK(autograd::gradgradcheck(
      [](const TensorList& v) { return batch_norm_add_relu(v[0], Tensor(), Tensor(), v[1], v[2], v[3], true); },
      {randn({2, 3, 2, 2}), randn({3}), randn({3}), randn({2, 3, 2, 2})}));
  CHECK_THROWS_WITH_AS(
      batch_norm_add_relu(randn({2, 3, 4, 4}), Tensor(), Tensor(), Tensor(), Tensor(), randn({2, 3, 4, 5}), true),
      doctest::Contains("[batch_norm_add_relu] the residual must have the input's shape"), Error);
}

TEST_CASE("BatchNorm2d::forward_add_relu: relu(forward(x) + residual), running statistics and the batch count too") {
  manual_seed(13);
  nn::BatchNorm2d a(4), b(4);
  b.load_state_dict(a.state_dict());
  const Tensor x = randn({2, 4, 3, 3}), r = randn({2, 4, 3, 3});
  for (int step = 0; step < 2; ++step) {
    CHECK(bitwise_equal(a.forward_add_relu(x, r), relu(b(x) + r)));
    CHECK(bitwise_equal(a.forward_add_relu(x, Tensor()), relu(b(x))));
  }
  CHECK(bitwise_equal(a.running_mean, b.running_mean));
  CHECK(bitwise_equal(a.running_var, b.running_var));
  CHECK(a.num_batches_tracked.item<int64_t>() == 4);
  a.eval();
  b.eval();
  CHECK(bitwise_equal(a.forward_add_relu(x, r), relu(b(x) + r)));
  CHECK_THROWS_WITH_AS(a.forward_add_relu(randn({2, 5, 3, 3}), Tensor()), doctest::Contains("[BatchNorm2d]"), Error);
}
