// CUDA against CPU for the nn ops: softmax, losses, norms, pooling, conv2d and conv2d_relu (cuDNN), indexing,
// where/clamp and dropout, each on the same inputs with per-dtype tolerances (row sums are
// float32 on both sides but in a different order, hence looser than the elementwise ones).
#include "helpers.h"
#ifdef HG_WITH_CUDA
#include "kernels/cuda/dnn/conv_stats.h"
#endif

using namespace hg;
using hg::test::check_close;
using hg::test::check_cuda_matches_cpu;
using hg::test::check_with_grad;
using hg::test::row_tolerance;
using hg::test::Tolerance;

namespace {
const Dtype kFloats[] = {kFloat32, kFloat16, kBFloat16, kFloat64};
}  // namespace

TEST_CASE("cuda softmax and log_softmax (+backward) match the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor x = randn({6, 37, 5}).to(d);
    check_with_grad([](const auto& v) { return softmax(v[0], 1); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return log_softmax(v[0], -1); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return softmax(v[0], 2); }, {randn({3, 700}).to(d).reshape({3, 1, 700})},
                    row_tolerance(d));
  }
}

TEST_CASE("cuda losses (+backward) match the CPU") {
  for (Dtype d : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(d);
    const Tensor logits = randn({8, 10}).to(d), target = randint(0, 10, {8});
    check_with_grad([&](const auto& v) { return cross_entropy(v[0], v[1]); }, {logits, target}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return cross_entropy(v[0], v[1], Reduction::Sum, -100, 0.1); },
                    {logits, target}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return nll_loss(log_softmax(v[0], 1), v[1]); }, {logits, target},
                    row_tolerance(d));
    check_with_grad([&](const auto& v) { return mse_loss(v[0], v[1]); }, {randn({4, 5}).to(d), randn({4, 5}).to(d)},
                    row_tolerance(d));
    check_with_grad([&](const auto& v) { return binary_cross_entropy_with_logits(v[0], v[1]); },
                    {randn({4, 5}).to(d), rand({4, 5}).to(d)}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return binary_cross_entropy(v[0], v[1]); },
                    {rand({4, 5}).to(d) * 0.9 + 0.05, rand({4, 5}).to(d)}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return l1_loss(v[0], v[1]); }, {randn({4, 5}).to(d), randn({4, 5}).to(d)},
                    row_tolerance(d));
    check_with_grad([&](const auto& v) { return smooth_l1_loss(v[0], v[1], Reduction::Sum, 0.5); },
                    {randn({4, 5}).to(d), randn({4, 5}).to(d)}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return huber_loss(v[0], v[1], Reduction::None, 0.7); },
                    {randn({4, 5}).to(d), randn({5}).to(d)}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return kl_div(log_softmax(v[0], 1), v[1], Reduction::BatchMean); },
                    {randn({4, 5}).to(d), rand({4, 5}).to(d)}, row_tolerance(d));
    check_with_grad([&](const auto& v) { return kl_div(v[0], v[1], Reduction::Mean, true); },
                    {randn({4, 5}).to(d), randn({4, 5}).to(d)}, row_tolerance(d));
  }
  // A bad target is found on the device and raised at the next synchronisation (here item()).
  const Tensor bad_loss = cross_entropy(randn({2, 3}).to(kCUDA), full({2}, 7.0, TensorOptions(kInt64)).to(kCUDA));
  CHECK_THROWS_WITH_AS(bad_loss.item<double>(), doctest::Contains("[cross_entropy] target 7"), Error);
  const Tensor bad_nll = nll_loss(randn({2, 3}).to(kCUDA), full({2}, -2.0, TensorOptions(kInt64)).to(kCUDA));
  CHECK_THROWS_WITH_AS(cuda::synchronize(), doctest::Contains("[nll_loss] target -2"), Error);
  CHECK_NOTHROW(cuda::synchronize());  // raised once, then cleared
}

TEST_CASE("cuda layer_norm, batch_norm and group_norm (+backward) match the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor x = randn({4, 6, 3, 3}).to(d);
    const Tensor w = randn({3, 3}).to(d), b = randn({3, 3}).to(d);
    check_with_grad([](const auto& v) { return layer_norm(v[0], {3, 3}, v[1], v[2]); }, {x, w, b}, row_tolerance(d));
    const Tensor cw = randn({6}).to(d), cb = randn({6}).to(d);
    check_with_grad([](const auto& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); }, {x, cw, cb},
                    row_tolerance(d));
    const Tensor rm = randn({6}), rv = rand({6}) + 0.5;
    check_with_grad(
        [&](const auto& v) { return batch_norm(v[0], rm.to(v[0].device()), rv.to(v[0].device()), v[1], v[2], false); },
        {x, cw, cb}, row_tolerance(d));
    check_with_grad([](const auto& v) { return group_norm(v[0], 3, v[1], v[2]); }, {x, cw, cb}, row_tolerance(d));
  }
}

TEST_CASE("cuda max/avg pooling (+backward) match the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tensor x = randn({2, 3, 9, 8}).to(d);
    check_with_grad([](const auto& v) { return max_pool2d(v[0], {3, 2}, {2, 2}, {1, 1}); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return max_pool2d(v[0], {2}, {}, {0}, {2}, true); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return avg_pool2d(v[0], {3}, {2}, {1}, true, false); }, {x}, row_tolerance(d));
    check_with_grad([](const auto& v) { return avg_pool2d(v[0], {2}); }, {x}, row_tolerance(d));
  }
}

TEST_CASE("cuda conv2d (and conv1d through it) via cuDNN (+backward) match the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : row_tolerance(d);
    check_with_grad([](const auto& v) { return conv2d(v[0], v[1], v[2], {1}, {1}); },
                    {randn({2, 4, 7, 6}).to(d), randn({5, 4, 3, 3}).to(d), randn({5}).to(d)}, tol);
    check_with_grad([](const auto& v) { return conv2d(v[0], v[1], Tensor(), {2}, {0}, {2}, 2); },
                    {randn({1, 4, 9, 9}).to(d), randn({6, 2, 2, 2}).to(d)}, tol);
    check_with_grad([](const auto& v) { return conv1d(v[0], v[1], v[2], 2, 1, 2, 2); },
                    {randn({2, 4, 11}).to(d), randn({6, 2, 3}).to(d), randn({6}).to(d)}, tol);
  }
}

#ifdef HG_WITH_CUDA
TEST_CASE("cuda conv2d: cuDNN execution plans are built once per shape and follow the operands' alignment") {
  const auto stats = [] { return cuda::dnn::conv_plan_stats(); };
  if (!stats().graph_api) {
    MESSAGE("SKIPPED: the graph-API path is not in use (no cuDNN, or HG_CUDNN_LEGACY_API=1)");
    return;
  }
  manual_seed(31);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(d);
    const Tensor x_cpu = randn({3, 5, 8, 7}).to(d), w_cpu = randn({4, 5, 3, 3}).to(d), b_cpu = randn({4}).to(d);
    auto step = [&](const Tensor& x, const Tensor& w) {
      const Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
      const Tensor y = conv2d(xg, wg, b_cpu.to(kCUDA), {1}, {1});
      y.to(kFloat32).sum().backward();
      return std::vector<Tensor>{y.to(kCPU), xg.grad().to(kCPU), wg.grad().to(kCPU)};
    };
    (void)step(x_cpu.to(kCUDA), w_cpu.to(kCUDA));  // builds the forward and both backward plans
    const auto before = stats();
    for (int i = 0; i < 3; ++i) (void)step(x_cpu.to(kCUDA), w_cpu.to(kCUDA));
    const auto after = stats();
    CHECK(after.plans_built == before.plans_built);
    CHECK(after.executions == before.executions + 9);  // three passes a step
    CHECK(after.fallbacks == 0);

    // The same shapes one element off a 16-byte boundary: new plans, built for that alignment,
    // and results that still match the CPU.
    auto misaligned = [](const Tensor& t) {
      Tensor buf = empty({t.numel() + 1}, TensorOptions(t.dtype()).device(kCUDA));
      Tensor v = buf.narrow(0, 1, t.numel()).view(t.shape());
      v.copy_(t);
      return v;
    };
    const auto gpu = step(misaligned(x_cpu), misaligned(w_cpu));
    CHECK(stats().plans_built > after.plans_built);
    CHECK(stats().fallbacks == 0);
    const Tensor xc = x_cpu.detach().requires_grad_(), wc = w_cpu.detach().requires_grad_();
    const Tensor yc = conv2d(xc, wc, b_cpu, {1}, {1});
    yc.to(kFloat32).sum().backward();
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : row_tolerance(d);
    check_close(gpu[0].to(kFloat64), yc.detach().to(kFloat64), tol);
    check_close(gpu[1].to(kFloat64), xc.grad().to(kFloat64), tol);
    check_close(gpu[2].to(kFloat64), wc.grad().to(kFloat64), tol);
  }
}
#endif

#ifdef HG_WITH_CUDA
TEST_CASE("cuda conv2d under set_cudnn_deterministic(true): deterministic engines, repeatable gradients") {
  const auto stats = [] { return cuda::dnn::conv_plan_stats(); };
  const bool graph = stats().graph_api;  // the plan counters exist on the graph path only
  CHECK_FALSE(cudnn_deterministic());    // off by default
  struct Restore {
    ~Restore() { set_cudnn_deterministic(false); }
  } restore;
  manual_seed(32);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(d);
    // The MNIST CNN's second layer at batch 64: a weight gradient over 64 x 26 x 26 positions,
    // where cuDNN's fastest engines split the sum across blocks.
    const Tensor x = randn({64, 32, 26, 26}).to(d).to(kCUDA), w = randn({64, 32, 3, 3}).to(d).to(kCUDA);
    auto grads = [&] {
      const Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
      conv2d(xg, wg).to(kFloat32).sum().backward();
      return std::vector<Tensor>{xg.grad().to(kCPU), wg.grad().to(kCPU)};
    };
    (void)grads();  // plans for the default, which may be non-deterministic
    const auto before = stats();
    set_cudnn_deterministic(true);
    const auto first = grads(), second = grads();
    set_cudnn_deterministic(false);
    const auto after = stats();
    if (graph) {
      CHECK(after.plans_built == before.plans_built + 3);  // the flag is part of every plan's key
      CHECK(after.nondeterministic_plans == before.nondeterministic_plans);
      CHECK(after.fallbacks == before.fallbacks);
    }
    for (size_t i = 0; i < first.size(); ++i) CHECK(hg::test::bitwise_equal(second[i], first[i]));
    // And the deterministic engines compute the same gradients as the default ones, to rounding.
    const auto reference = grads();
    for (size_t i = 0; i < first.size(); ++i)
      check_close(first[i].to(kFloat64), reference[i].to(kFloat64),
                  d == kFloat32 ? Tolerance{1e-3, 1e-4} : row_tolerance(d));
  }
}
#endif

TEST_CASE("cuda conv2d_relu (cuDNN, then bias and ReLU in one pass) (+backward) matches the CPU") {
  for (Dtype d : kFloats) {
    CAPTURE(d);
    const Tolerance tol = d == kFloat32 ? Tolerance{1e-4, 1e-4} : row_tolerance(d);
    if (d == kFloat32 || d == kFloat64) {
      check_with_grad([](const auto& v) { return conv2d_relu(v[0], v[1], v[2], {1}, {1}); },
                      {randn({2, 4, 7, 6}).to(d), randn({5, 4, 3, 3}).to(d), randn({5}).to(d)}, tol);
      // Without a bias the pass applies ReLU alone.
      check_with_grad([](const auto& v) { return conv2d_relu(v[0], v[1], Tensor(), {2}, {1}); },
                      {randn({2, 4, 7, 6}).to(d), randn({5, 4, 3, 3}).to(d)}, tol);
    } else {
      // With random values, a pre-activation within rounding of 0 can be positive on one device
      // and negative on the other, and that one flipped ReLU mask moves a whole patch of the
      // gradients (seen on an H200 in float16: a bias gradient of 32 against 33). Small integers
      // make every sum exact on both, so the masks must agree and the gradients match exactly.
      check_with_grad(
          [](const auto& v) { return conv2d_relu(v[0], v[1], v[2], {1}, {1}); },
          {randint(-2, 3, {2, 4, 7, 6}).to(d), randint(-1, 2, {5, 4, 3, 3}).to(d), randint(-2, 3, {5}).to(d)}, {0, 0});
    }
  }
}

TEST_CASE("cuda conv2d_relu_max_pool2d (conv2d_relu then max_pool2d there) (+backward) matches the CPU") {
  for (Dtype d : {kFloat32, kFloat64}) {
    CAPTURE(d);
    check_with_grad([](const auto& v) { return conv2d_relu_max_pool2d(v[0], v[1], v[2], {1}, {1}); },
                    {randn({2, 4, 7, 6}).to(d), randn({5, 4, 3, 3}).to(d), randn({5}).to(d)},
                    d == kFloat32 ? Tolerance{1e-4, 1e-4} : row_tolerance(d));
  }
}

TEST_CASE("cuda indexing, where, clamp, embedding match the CPU") {
  const Tensor x = randn({5, 7});
  const Tensor idx = randint(0, 5, {3, 7});
  check_cuda_matches_cpu([](const auto& v) { return gather(v[0], 0, v[1]); }, {x, idx}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return scatter_add(v[0], 0, v[1], v[2]); }, {x, idx, randn({3, 7})},
                         {1e-6, 1e-6});
  const Tensor rows = randint(0, 7, {9});
  check_cuda_matches_cpu([](const auto& v) { return index_select(v[0], 1, v[1]); }, {x, rows}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return index_add(v[0], 1, v[1], v[2]); }, {x, rows, randn({5, 9})},
                         {1e-6, 1e-6});
  check_cuda_matches_cpu([](const auto& v) { return where(v[0] > 0.0, v[0], v[1]); }, {x, randn({7})}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return masked_fill(v[0], v[0] < 0.0, 3.0); }, {x}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return v[0].clamp(-0.5, 0.5); }, {x}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return embedding(v[0], v[1]); }, {x, randint(0, 5, {2, 3})}, {0, 0});
  check_cuda_matches_cpu([](const auto& v) { return cat({v[0], v[0] * 2.0}, 1); }, {x}, {0, 0});
  // Bad indices are skipped on the device and raised, naming the op, at the next synchronisation.
  const Tensor picked = index_select(x.to(kCUDA), 0, full({1}, 9.0, TensorOptions(kInt64)).to(kCUDA));
  CHECK_THROWS_WITH_AS(picked.to(kCPU), doctest::Contains("[index_select] index 9"), Error);
  const Tensor looked_up = embedding(x.to(kCUDA), full({2}, 5.0, TensorOptions(kInt64)).to(kCUDA));
  CHECK_THROWS_WITH_AS(looked_up.sum().item<double>(), doctest::Contains("[embedding] index 5"), Error);
  const Tensor gathered = gather(x.to(kCUDA), 0, full({1, 1}, -1.0, TensorOptions(kInt64)).to(kCUDA));
  CHECK_THROWS_WITH_AS(cuda::synchronize(), doctest::Contains("[gather] index -1"), Error);
  CHECK(gathered.to(kCPU).item<double>() == 0.0);  // the bad element was skipped (written as 0); cleared since
}

TEST_CASE("cuda dropout draws the CPU's mask for the same seed") {
  for (Dtype d : {kFloat32, kBFloat16}) {
    const Tensor x = ones({1000}).to(d);
    manual_seed(3);
    const Tensor cpu = dropout(x, 0.3);
    manual_seed(3);
    const Tensor gpu = dropout(x.to(kCUDA), 0.3);
    check_close(gpu.to(kCPU), cpu, {0, 0});
  }
}

TEST_CASE("cuda conv2d double backward (a gradient penalty) matches the CPU") {
  manual_seed(21);
  const Tensor x0 = randn({2, 4, 6, 6}), w0 = randn({6, 2, 3, 3}), b0 = randn({6});
  auto run = [&](Device dev) {
    Tensor x = x0.detach().to(dev).requires_grad_(), w = w0.detach().to(dev).requires_grad_(),
           b = b0.detach().to(dev).requires_grad_();
    const Tensor y = conv2d(x, w, b, {2}, {1}, {1}, 2);
    const Tensor g = autograd::grad({tanh(y).sum()}, {x}, {}, std::nullopt, true)[0];
    pow(norm(g.flatten(1), 2.0, {1}) - 1.0, 2.0).mean().backward();
    return std::vector<Tensor>{x.grad().to(kCPU), w.grad().to(kCPU), b.grad().to(kCPU)};
  };
  const auto cpu = run(kCPU), gpu = run(kCUDA);
  for (size_t i = 0; i < cpu.size(); ++i) check_close(gpu[i], cpu[i], {1e-4, 1e-3});
}

TEST_CASE("cuda cross_entropy_fused_ writes cross_entropy's gradient into the logits, bf16 and float32, vocab 50304") {
  // The GPT-2 classifier's shape, small: rows of 50304 classes, one ignored target. The CUDA
  // gradient (written in place) matches the CPU's fused op and the unfused cross_entropy.
  for (const Dtype dt : {kFloat32, kBFloat16}) {
    CAPTURE(dt);
    manual_seed(3);
    const Tensor logits_cpu = (randn({8, 50304}) * 3.0).to(dt);
    std::vector<int64_t> t = {5, 50303, -100, 0, 17, 40000, 9, 1};
    const Tensor target = tensor(t);
    auto grads = [&](Device device, bool fused) {
      Tensor leaf = logits_cpu.to(device).requires_grad_();
      Tensor logits = leaf * 1.0;  // a non-leaf, as a linear's output
      const Tensor loss = fused ? cross_entropy_fused_(logits, target.to(device))
                                : cross_entropy(logits.to(kFloat32), target.to(device));
      (loss * 256.0).backward();
      return std::make_pair(loss.to(kCPU).to(kFloat32), leaf.grad().to(kCPU).to(kFloat32));
    };
    const auto cpu = grads(kCPU, true), cuda = grads(kCUDA, true), plain = grads(kCUDA, false);
    check_close(cuda.first, cpu.first, {1e-5, 1e-5});
    check_close(cuda.second, cpu.second, {2e-3, 1e-2});
    check_close(cuda.second, plain.second, {2e-3, 1e-2});
    CHECK(cuda.second.select(0, 2).abs().sum().item<double>() == 0.0);  // the ignored row
  }
}
