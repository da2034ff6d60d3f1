// cross_entropy_fused_: the same loss as cross_entropy (bit for bit: the same max, exponentials
// and sums) and the same gradients to float32 rounding (the CPU's one-pass kernel multiplies in
// another order), with the gradient written into the logits during the forward.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::tolerance;

namespace {

struct Run {
  Tensor loss, grad_a, grad_w, logits_after;
};

// logits = a @ w^T (a non-leaf), then the loss; backward with `scale` as the upstream gradient.
Run run(bool fused, Reduction reduction, double smoothing, double scale, Dtype autocast_dtype = kFloat32) {
  manual_seed(21);
  Tensor a = randn({6, 8}).requires_grad_();
  Tensor w = randn({50, 8}).requires_grad_();
  const Tensor target = tensor(std::vector<int64_t>{3, -100, 49, 0, 17, 3});
  Run r;
  Tensor logits;
  {
    const bool on = autocast_dtype != kFloat32;
    amp::AutocastGuard autocast(kCPU, on ? std::optional<Dtype>(autocast_dtype) : std::nullopt, on);
    logits = linear(a, w);
    r.loss = fused ? cross_entropy_fused_(logits, target, reduction, -100, smoothing)
                   : cross_entropy(logits, target, reduction, -100, smoothing);
  }
  r.logits_after = logits.detach().clone();
  Tensor l = r.loss.to(kFloat32);
  if (reduction == Reduction::None) l = (l * arange(6.0, 12.0, 1.0)).sum();  // a different weight per row
  (l * scale).backward();
  r.grad_a = a.grad();
  r.grad_w = w.grad();
  return r;
}

}  // namespace

TEST_CASE("cross_entropy_fused_ gives cross_entropy's loss and gradients, writing the gradient into the logits") {
  for (const Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (const double smoothing : {0.0, 0.1}) {
      for (const double scale : {1.0, 1024.0}) {
        CAPTURE(static_cast<int>(reduction));
        CAPTURE(smoothing);
        CAPTURE(scale);
        const Run plain = run(false, reduction, smoothing, scale), fused = run(true, reduction, smoothing, scale);
        CHECK(fused.loss.dtype() == kFloat32);
        CHECK(fused.loss.to_vector<float>() == plain.loss.to_vector<float>());
        // Sums of gradients with mixed signs: errors relative to the largest value, not each one.
        for (const auto& [got, want] : {std::pair{fused.grad_a, plain.grad_a}, std::pair{fused.grad_w, plain.grad_w}}) {
          const double largest = want.abs().max().item<double>();
          hg::test::check_close(got, want, {1e-5 * largest, 1e-5});
        }
        if (reduction == Reduction::Mean && scale == 1.0) {
          // The logits hold the gradient itself: softmax minus the (smoothed) one-hot, over the
          // 5 kept targets, 0 on the ignored row.
          const Tensor expected =
              (softmax(plain.logits_after, 1) -
               one_hot(tensor(std::vector<int64_t>{3, 0, 49, 0, 17, 3}), 50).to(kFloat32) * (1.0 - smoothing) -
               smoothing / 50.0) /
              5.0;
          const Tensor got = fused.logits_after;
          hg::test::check_close(got.narrow(0, 2, 4), expected.narrow(0, 2, 4), {1e-6, 1e-6});
          CHECK(got.select(0, 1).abs().sum().item<double>() == 0.0);
        }
      }
    }
  }
}

TEST_CASE("cross_entropy_fused_ under bfloat16 autocast: bf16 logits read and written in place, float32 loss") {
  const Run plain = run(false, Reduction::Mean, 0.0, 1.0, kBFloat16);
  const Run fused = run(true, Reduction::Mean, 0.0, 1.0, kBFloat16);
  CHECK(fused.logits_after.dtype() == kBFloat16);  // the policy passes them through: no float32 copy
  CHECK(fused.loss.dtype() == kFloat32);
  hg::test::check_close(fused.loss, plain.loss.to(kFloat32), {1e-6, 1e-6});
  hg::test::check_close(fused.grad_w, plain.grad_w, {1e-6, 1e-6});
  hg::test::check_close(fused.grad_a, plain.grad_a, {1e-6, 1e-6});
}

TEST_CASE("cross_entropy_fused_ refuses what it cannot do, and leaves logits alone when no backward will come") {
  const Tensor target = tensor(std::vector<int64_t>{1, 2});
  Tensor leaf = randn({2, 5}).requires_grad_();
  check_error([&] { cross_entropy_fused_(leaf, target); }, {"[cross_entropy_fused_]", "leaf", "use cross_entropy"});
  check_error([&] { cross_entropy_fused_(randn({2, 5, 3}), target); }, {"[cross_entropy_fused_]", "[N, C]"});
  check_error([&] { cross_entropy_fused_(randn({2, 5}), target.to(kInt32)); }, {"[cross_entropy_fused_]", "int64"});
  check_error([&] { cross_entropy_fused_(randn({3, 5}), target); }, {"[cross_entropy_fused_]", "shape [3]"});
  check_error(
      [&] {
        cross_entropy_fused_(randn({2, 5}), target, Reduction::Mean, -100, 1.5);
      },
      {"[cross_entropy_fused_]", "label_smoothing"});
  check_error(
      [&] {
        cross_entropy_fused_(randn({2, 5}), tensor(std::vector<int64_t>{1, 7}));
      },
      {"[cross_entropy]", "target 7", "out of range"});  // the shared kernel names itself

  // Twice through one graph: the gradient was consumed by the first backward.
  Tensor w = randn({5, 4}).requires_grad_();
  const Tensor loss = cross_entropy_fused_(linear(randn({2, 4}), w), target);
  loss.backward(Tensor(), /*retain_graph=*/true);
  check_error([&] { loss.backward(); }, {"[cross_entropy_fused_]", "can be taken once"});

  // Without grad, the logits keep their values and the loss is cross_entropy's.
  Tensor logits = randn({2, 5});
  const std::vector<float> before = logits.to_vector<float>();
  {
    NoGradGuard no_grad;
    CHECK(cross_entropy_fused_(logits, target).item<float>() == cross_entropy(logits, target).item<float>());
  }
  CHECK(logits.to_vector<float>() == before);
}

TEST_CASE("cross_entropy_fused_: a tensor saved from the logits before the loss sees the write") {
  Tensor w = randn({5, 4}).requires_grad_();
  const Tensor logits = linear(randn({2, 4}), w);
  const Tensor probs = logits.exp();       // saves its output; the logits' version moves under it
  const Tensor squared = logits * logits;  // saves the logits themselves
  const Tensor loss = cross_entropy_fused_(logits, tensor(std::vector<int64_t>{1, 2}));
  check_error([&] { (loss + squared.sum()).backward(); }, {"modified"});
  (void)probs;
}

TEST_CASE("cross_entropy_fused_ gradients match finite differences") {
  // Each evaluation makes fresh logits (x * 1.0), so the in-place write never touches the input.
  const Tensor target = tensor(std::vector<int64_t>{0, 6, -100, 3});
  for (const Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CAPTURE(static_cast<int>(reduction));
    CHECK(autograd::gradcheck(
        [&](const TensorList& x) { return cross_entropy_fused_(x[0] * 1.0, target, reduction, -100, 0.05); },
        {randn({4, 7}, kFloat64)}));
  }
}

TEST_CASE("cross_entropy_fused_ on bfloat16 and float16 logits: cross_entropy's values within their rounding") {
  // Without autocast: the 16-bit logits are read and written in their dtype, the loss in float32.
  const Tensor target = tensor(std::vector<int64_t>{4, 0, 7, -100, 2});
  for (const Dtype dt : {kBFloat16, kFloat16}) {
    CAPTURE(dt);
    manual_seed(5);
    const Tensor base = (randn({5, 9}) * 2.0).to(dt);
    Tensor leaf_f = base.clone().requires_grad_(), leaf_p = base.clone().requires_grad_();
    const Tensor fused = cross_entropy_fused_(leaf_f * 1.0, target, Reduction::Sum);
    const Tensor plain = cross_entropy(leaf_p * 1.0, target, Reduction::Sum);
    CHECK(fused.dtype() == kFloat32);
    CHECK(plain.dtype() == dt);  // cross_entropy returns the input's dtype
    check_close(fused, plain.to(kFloat32), tolerance(dt));
    (fused * 3.0).backward();
    (plain.to(kFloat32) * 3.0).backward();
    CHECK(leaf_f.grad().dtype() == dt);
    check_close(leaf_f.grad(), leaf_p.grad(), tolerance(dt));
  }
}

TEST_CASE("cross_entropy_fused_ with another ignore_index, and a batch with every target ignored") {
  manual_seed(6);
  const Tensor x = randn({4, 6});
  const Tensor target = tensor(std::vector<int64_t>{5, 2, 2, 0});
  for (const Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CAPTURE(static_cast<int>(reduction));
    Tensor a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
    const Tensor fused = cross_entropy_fused_(a * 1.0, target, reduction, /*ignore_index=*/2);
    const Tensor plain = cross_entropy(b * 1.0, target, reduction, /*ignore_index=*/2);
    check_close(fused, plain, {1e-6, 1e-6});
    fused.sum().backward();
    plain.sum().backward();
    check_close(a.grad(), b.grad(), {1e-6, 1e-6});
    CHECK(a.grad().narrow(0, 1, 2).abs().sum().item<double>() == 0.0);  // rows 1 and 2 are ignored
  }
  // All ignored: the mean is 0 / 0 = NaN as in cross_entropy (and PyTorch), the gradient zero.
  Tensor a = x.clone().requires_grad_();
  const Tensor all_ignored = full({4}, -100.0, TensorOptions(kInt64));
  const Tensor loss = cross_entropy_fused_(a * 1.0, all_ignored);
  CHECK(std::isnan(loss.item<float>()));
  CHECK(std::isnan(cross_entropy(x, all_ignored).item<float>()));
  CHECK(cross_entropy_fused_(x * 1.0, all_ignored, Reduction::Sum).item<float>() == 0.0f);
  loss.backward();
  CHECK(a.grad().abs().sum().item<double>() == 0.0);
}

TEST_CASE(
    "cross_entropy_fused_: the loss's gradient lives in the logits (no memory beyond them), cross_entropy's is a "
    "second logits-sized tensor") {
  // Bytes alive when the logits' gradient reaches them (a hook on the logits sees it before it
  // flows on), beyond what was alive before the loss.
  constexpr int64_t kRows = 256, kVocab = 4096, kBytes = kRows * kVocab * 4;
  manual_seed(7);
  const Tensor target = randint(0, kVocab, {kRows});
  const Tensor data = randn({kRows, kVocab});
  Tensor w = randn({1}).requires_grad_();
  auto extra = [&](bool fused) {
    Tensor logits = data * w;  // a non-leaf that requires grad
    const int64_t before = cpu_memory_stats().allocated;
    int64_t at_gradient = -1;
    bool in_place = false;
    logits.register_hook([&](const Tensor& g) {
      at_gradient = cpu_memory_stats().allocated;
      in_place = g.raw_data() == logits.raw_data();
    });
    const Tensor loss = fused ? cross_entropy_fused_(logits, target) : cross_entropy(logits, target);
    loss.backward();
    REQUIRE(at_gradient >= 0);
    CHECK(in_place == fused);
    return at_gradient - before;
  };
  const int64_t fused = extra(true), plain = extra(false);
  CHECK(fused < kBytes / 16);  // per-row losses and scalars only
  CHECK(plain >= kBytes);      // the gradient cross_entropy's backward allocates
}

TEST_CASE(
    "cross_entropy_fused_ with padding columns: the loss and gradients of the classes alone, padding gradient 0") {
  // llm.c's padded vocabulary: logits [N, 56] of which 50 are classes. The padding holds large
  // values that would dominate the softmax if it were read.
  manual_seed(22);
  for (const Dtype dt : {kFloat32, kBFloat16, kFloat64}) {
    for (const double smoothing : {0.0, 0.1}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(smoothing);
      const Tensor classes = (randn({6, 50}) * 3.0).to(dt);
      const Tensor padded_values = cat({classes, full({6, 6}, 1000.0, TensorOptions(dt))}, 1);
      const Tensor target = tensor(std::vector<int64_t>{3, -100, 49, 0, 17, 3});
      Tensor a = classes.detach().requires_grad_(), b = padded_values.detach().requires_grad_();
      const Tensor plain = cross_entropy_fused_(a * 1.0, target, Reduction::Mean, -100, smoothing);
      const Tensor padded = cross_entropy_fused_(b * 1.0, target, Reduction::Mean, -100, smoothing, 50);
      CHECK(padded.to_vector<double>() == plain.to_vector<double>());
      (padded * 3.0).backward();
      (plain * 3.0).backward();
      CHECK(b.grad().narrow(1, 0, 50).to(kFloat64).to_vector<double>() == a.grad().to(kFloat64).to_vector<double>());
      CHECK(b.grad().narrow(1, 50, 6).to(kFloat64).abs().sum().item<double>() == 0.0);
    }
  }
  // Every column a class: -1 and the column count are the default.
  const Tensor x = randn({3, 7});
  const Tensor t = tensor(std::vector<int64_t>{0, 6, 2});
  CHECK(cross_entropy_fused_(x * 1.0, t, Reduction::Sum, -100, 0.0, 7).item<float>() ==
        cross_entropy_fused_(x * 1.0, t, Reduction::Sum).item<float>());
  // A target in the padding is out of range; so is a class count beyond the columns.
  check_error([&] { cross_entropy_fused_(x * 1.0, t, Reduction::Mean, -100, 0.0, 5); }, {"[cross_entropy]", "6"});
  check_error([&] { cross_entropy_fused_(x * 1.0, t, Reduction::Mean, -100, 0.0, 8); },
              {"[cross_entropy_fused_]", "classes", "[1, 7]", "8"});
  check_error([&] { cross_entropy_fused_(x * 1.0, t, Reduction::Mean, -100, 0.0, 0); },
              {"[cross_entropy_fused_]", "classes"});
}
