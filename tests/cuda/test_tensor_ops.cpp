// CUDA against CPU for the tensor ops of issue 15: var/std/norm, cumsum, tril/triu, sort/topk
// (+ their gradients), multinomial (the same uniforms, so the same samples) and the composites
// (chunk/split/repeat/flip/clamp with tensor bounds/one_hot) that run on other ops' kernels.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_cuda_matches_cpu;
using hg::test::check_with_grad;
using hg::test::row_tolerance;
using hg::test::Tolerance;

namespace {
const Dtype kFloats[] = {kFloat32, kFloat16, kBFloat16, kFloat64};
}  // namespace

TEST_CASE("cuda var, std and norm (+backward) match the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor x = randn({6, 37, 5}).to(d);
    check_with_grad([](const auto& v) { return var(v[0], {1}); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return hg::std(v[0], {0, 2}, false, true); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return var(v[0]); }, {randn({3000}).to(d)}, row_tolerance(d));
    for (double p : {1.0, 2.0, double(INFINITY)})
      check_with_grad([p](const auto& v) { return norm(v[0], p, {-1}); }, {x}, row_tolerance(d));
  }
}

TEST_CASE("cuda cumsum, tril and triu (+backward) match the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor x = randn({4, 50, 3}).to(d);
    check_with_grad([](const auto& v) { return cumsum(v[0], 1); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return cumsum(v[0], -1); }, {x.transpose(0, 2)}, row_tolerance(d));
    check_with_grad([](const auto& v) { return tril(v[0], -1); }, {x}, {0, 0});
    check_with_grad([](const auto& v) { return triu(v[0], 2); }, {x.transpose(1, 2)}, {0, 0});
  }
  check_cuda_matches_cpu([](const auto& v) { return cumsum(v[0], 0); }, {randint(-5, 5, {40})}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return tril(v[0]).to(kInt64); }, {ones({5, 5}, kBool)}, {0, 0});
}

TEST_CASE("cuda sort, argsort and topk (+backward) match the CPU, ties and NaN included") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor x = randn({3, 70, 4}).to(d);
    check_with_grad([](const auto& v) { return sort(v[0], 1).first; }, {x}, {0, 0});
    check_with_grad([](const auto& v) { return topk(v[0], 5, -1, true).first; }, {x.transpose(1, 2)}, {0, 0});
    check_with_grad([](const auto& v) { return topk(v[0], 3, 0, false).first; }, {x}, {0, 0});
    check_cuda_matches_cpu([](const auto& v) { return argsort(v[0], 1, true); }, {x}, {0, 0});
  }
  const Tensor ties = tensor(std::vector<float>{2, NAN, 1, 2, 2, -1, NAN, 0}, {2, 4});
  check_cuda_matches_cpu([](const auto& v) { return sort(v[0], 1).second; }, {ties}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return topk(v[0], 3, 1).second; }, {ties}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return sort(v[0], 0, true).first; }, {randint(0, 3, {64})}, {0, 0});
}

TEST_CASE("cuda multinomial draws the CPU's samples for the same seed") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor p = (rand({5, 65}) * (rand({5, 65}) > 0.3).to(kFloat32)).to(d);
    for (bool replacement : {true, false}) {
      CAPTURE(replacement);
      manual_seed(50);
      const Tensor cpu = multinomial(p, 7, replacement);
      manual_seed(50);
      const Tensor gpu = multinomial(p.to(kCUDA), 7, replacement);
      REQUIRE(gpu.device().is_cuda());
      CHECK(gpu.to(kCPU).to_vector<int64_t>() == cpu.to_vector<int64_t>());
    }
  }
  CHECK_THROWS_WITH_AS(multinomial(zeros({2, 3}).to(kCUDA), 1, true), doctest::Contains("[multinomial]"), Error);
}

TEST_CASE("cuda composites: chunk, split, repeat, flip, clamp with tensor bounds, one_hot match the CPU") {
  const Tensor x = randn({6, 5});
  check_with_grad([](const auto& v) { return chunk(v[0], 4, 0)[1] * 2.0; }, {x}, {1e-6, 1e-6});
  check_with_grad([](const auto& v) { return split(v[0], 2, 1)[2]; }, {x}, {0, 0});
  check_with_grad([](const auto& v) { return repeat(v[0], {2, 1, 3}); }, {x}, {1e-6, 1e-6});
  check_with_grad([](const auto& v) { return flip(v[0], {0, 1}); }, {x}, {0, 0});
  check_with_grad([](const auto& v) { return clamp(v[0], v[1], v[2]); }, {x, randn({5}) - 1.0, randn({6, 1}) + 1.0},
                  {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return one_hot(v[0], 7); }, {randint(0, 7, {3, 4})}, {0, 0});
}

TEST_CASE("cuda in-place ops under autograd (on tensors and views) match the CPU, forward and gradients") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor a = randn({4, 6}).to(d), b = randn({4, 6}).to(d), row = randn({6}).to(d);
    const Tensor mask = randn({4, 6}) > 0.0;
    check_with_grad(
        [&](const auto& v) {
          Tensor y = v[0] * 1.0;
          y.narrow(1, 0, 3).mul_(v[1].narrow(1, 0, 3));
          y += v[2];
          y.clamp_(-1.0, 1.5);
          y.masked_fill_(mask.to(y.device()), 0.5);
          y.t().narrow(0, 4, 2).div_(2.0);
          // Last: relu_ saves its output, which a later in-place op on y would modify (an error
          // at backward, as in PyTorch).
          y.select(0, 2).relu_();
          return y;
        },
        {a, b, row}, row_tolerance(d));
  }
}
