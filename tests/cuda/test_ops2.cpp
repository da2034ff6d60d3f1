// pad, adaptive pools, interpolate, einsum and conv_transpose2d (issue 43 item 2) on CUDA against
// the CPU, forward and input gradients, on the same inputs. Written without a GPU: unrun until a
// GPU session runs the cuda suite.
#include "helpers.h"

using namespace hg;
using hg::test::check_with_grad;
using hg::test::row_tolerance;

namespace {
constexpr Dtype kOps2Floats[] = {kFloat32, kFloat64, kFloat16, kBFloat16};
}  // namespace

TEST_CASE("cuda pad (+backward) matches the CPU in every mode") {
  manual_seed(91);
  for (Dtype d : kOps2Floats) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({2, 3, 5, 6}).to(d);
    check_with_grad([](const auto& v) { return pad(v[0], {1, -2, 2, 1}, "constant", 0.5); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return pad(v[0], {3, 1, 2, 4}, "reflect"); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return pad(v[0], {4, 0, 1, 1, 1, 0}, "replicate"); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return pad(v[0], {-1, 5, 2, 0}, "circular"); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return pad(v[0], {2, 3}, "reflect"); }, {x.select(0, 0)}, row_tolerance(d));
  }
}

TEST_CASE("cuda adaptive pools (+backward) match the CPU, the global 1x1 path too") {
  manual_seed(92);
  for (Dtype d : kOps2Floats) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({2, 3, 9, 7}).to(d);
    for (const std::vector<int64_t>& size : std::vector<std::vector<int64_t>>{{1, 1}, {4, 3}, {11, 5}}) {
      check_with_grad([&](const auto& v) { return adaptive_avg_pool2d(v[0], size); }, {x}, row_tolerance(d));
      check_with_grad([&](const auto& v) { return adaptive_max_pool2d(v[0], size).first; }, {x}, row_tolerance(d));
      hg::test::check_cuda_matches_cpu([&](const auto& v) { return adaptive_max_pool2d(v[0], size).second; }, {x},
                                       {0, 0});
    }
    // A large plane: the block-per-plane global pooling kernel's reduction.
    check_with_grad([](const auto& v) { return adaptive_avg_pool2d(v[0], {1}); }, {randn({3, 2, 70, 90}).to(d)},
                    row_tolerance(d));
  }
}

TEST_CASE("cuda interpolate (+backward) matches the CPU") {
  manual_seed(93);
  for (Dtype d : kOps2Floats) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({2, 3, 5, 6}).to(d);
    for (const InterpolateOptions& o :
         std::vector<InterpolateOptions>{{.size = {9, 13}},
                                         {.scale_factor = {1.7, 0.6}},
                                         {.size = {9, 13}, .mode = "bilinear"},
                                         {.scale_factor = {2.5}, .mode = "bilinear", .align_corners = true},
                                         {.size = {3, 4}, .mode = "bilinear"}}) {
      CAPTURE(o.mode);
      check_with_grad([&](const auto& v) { return interpolate(v[0], o); }, {x}, row_tolerance(d));
    }
  }
}

TEST_CASE("cuda einsum and conv_transpose2d (+backward) match the CPU") {
  manual_seed(94);
  for (Dtype d : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(d));
    check_with_grad(
        [](const auto& v) {
          return einsum("bij,bjk->bik", {v[0], v[1]});
        },
        {randn({3, 4, 5}).to(d), randn({3, 5, 2}).to(d)}, row_tolerance(d));
    check_with_grad(
        [](const auto& v) {
          return einsum("...ii,...i->...", {v[0], v[1]});
        },
        {randn({2, 4, 4}).to(d), randn({4}).to(d)}, row_tolerance(d));
    check_with_grad(
        [](const auto& v) {
          return conv_transpose2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 0}, 2, {1, 2});
        },
        {randn({2, 4, 5, 6}).to(d), randn({4, 3, 3, 2}).to(d), randn({6}).to(d)}, hg::test::Tolerance{1e-4, 1e-3});
    check_with_grad(  // output_padding below the dilation only: the input is extended with zeros inside
        [](const auto& v) {
          return conv_transpose2d(v[0], v[1], v[2], {1, 2}, {0, 1}, {1, 1}, 1, {2, 1});
        },
        {randn({2, 2, 4, 3}).to(d), randn({2, 3, 2, 3}).to(d), randn({3}).to(d)}, hg::test::Tolerance{1e-4, 1e-3});
  }
}
