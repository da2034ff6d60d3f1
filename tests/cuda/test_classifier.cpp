// The classifier on CUDA (issue 41 item 3): cross_entropy's autocast row reads 16-bit logits as
// they are and gives a float32 copy's loss and gradient bit for bit; cross_entropy_fused_'s
// one-pass kernel against the CPU's for every reduction, smoothing and ignore_index, on rows
// that do and do not allow 16-byte loads; its memory; a bad target's error.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {

struct ClassifierRun {
  Tensor loss, grad;  // on the CPU
};

// logits = leaf * 1.0 (a non-leaf, as a linear's output), then `loss_of`, then backward with an
// upstream gradient of 128 (GradScaler's scaling); the leaf's gradient.
ClassifierRun classifier_run(const Tensor& values, Device device, const std::function<Tensor(const Tensor&)>& loss_of) {
  Tensor leaf = values.detach().to(device).requires_grad_();
  const Tensor loss = loss_of(leaf * 1.0);
  Tensor l = loss.to(kFloat32);
  if (l.dim() > 0) l = (l * arange(1.0, static_cast<double>(l.numel()) + 1.0, 1.0).to(device)).sum();
  (l * 128.0).backward();
  return {loss.to(kCPU), leaf.grad().to(kCPU)};
}

std::vector<int64_t> classifier_targets(int64_t rows, int64_t classes) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < rows; ++i) t.push_back(i % 5 == 2 ? -100 : (i * 7919) % classes);
  t.back() = classes - 1;
  return t;
}

}  // namespace

TEST_CASE(
    "cuda cross_entropy under bfloat16 autocast reads bf16 logits uncopied: a float32 copy's loss and gradient, bit "
    "for bit") {
  manual_seed(11);
  const Tensor values = (randn({24, 1000}) * 4.0).to(kBFloat16);
  const Tensor target = tensor(classifier_targets(24, 1000)).to(kCUDA);
  for (const Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (const double smoothing : {0.0, 0.1}) {
      CAPTURE(static_cast<int>(reduction));
      CAPTURE(smoothing);
      auto under_autocast = [&](bool explicit_copy) {
        return [&, explicit_copy](const Tensor& logits) {
          amp::AutocastGuard autocast(kCUDA, kBFloat16);
          OpRecorder rec;
          const Tensor in = explicit_copy ? logits.to(kFloat32) : logits;
          const Tensor loss = cross_entropy(in, target, reduction, -100, smoothing);
          CHECK(loss.dtype() == kFloat32);
          for (const OpEvent& e : rec.events()) {
            if (e.name != "cross_entropy") continue;
            CHECK(e.inputs == std::vector<Dtype>{explicit_copy ? kFloat32 : kBFloat16, kInt64});
            CHECK(e.outputs == std::vector<Dtype>{kFloat32});
          }
          CHECK(rec.count("to") == (explicit_copy ? 1u : 0u));  // the policy made no copy
          return loss;
        };
      };
      const ClassifierRun direct = classifier_run(values, kCUDA, under_autocast(false));
      const ClassifierRun copied = classifier_run(values, kCUDA, under_autocast(true));
      CHECK(direct.grad.dtype() == kBFloat16);
      CHECK(direct.loss.to_vector<float>() == copied.loss.to_vector<float>());
      CHECK(direct.grad.to(kFloat32).to_vector<float>() == copied.grad.to(kFloat32).to_vector<float>());
    }
  }
}

TEST_CASE(
    "cuda cross_entropy_fused_'s one-pass kernel matches the CPU's: reductions, smoothing, ignore_index, dtypes, "
    "unaligned rows") {
  // 50304 classes (16-byte loads) and 50257 (GPT-2's own vocabulary: rows not 16-byte aligned,
  // the scalar path), 1000 for a short row.
  for (const int64_t classes : {int64_t{50304}, int64_t{50257}, int64_t{1000}}) {
    for (const Dtype dt : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      CAPTURE(classes);
      CAPTURE(dt);
      manual_seed(3);
      const Tensor values = (randn({6, classes}) * 3.0).to(dt);
      const std::vector<int64_t> t = classifier_targets(6, classes);
      for (const Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        for (const double smoothing : {0.0, 0.1}) {
          CAPTURE(static_cast<int>(reduction));
          CAPTURE(smoothing);
          auto fused_on = [&](Device device) {
            return classifier_run(values, device, [&](const Tensor& logits) {
              return cross_entropy_fused_(logits, tensor(t).to(device), reduction, -100, smoothing);
            });
          };
          const ClassifierRun cpu = fused_on(kCPU), gpu = fused_on(kCUDA);
          const hg::test::Tolerance tol =
              dt == kFloat64 ? hg::test::Tolerance{1e-10, 1e-10} : hg::test::Tolerance{2e-5, 2e-5};
          check_close(gpu.loss, cpu.loss, tol);
          // Gradients: one rounding into the logits' dtype on each side, from float32 values
          // summed in a different order; relative to the row's largest value.
          const double largest = cpu.grad.to(kFloat64).abs().max().item<double>();
          const double eps = dt == kBFloat16 ? 8e-3 : dt == kFloat16 ? 1e-3 : dt == kFloat32 ? 1e-5 : 1e-10;
          check_close(gpu.grad.to(kFloat64), cpu.grad.to(kFloat64), {eps * largest, eps});
          CHECK(gpu.grad.select(0, 2).to(kFloat32).abs().sum().item<double>() == 0.0);  // ignored row
        }
      }
    }
  }
}

TEST_CASE("cuda cross_entropy_fused_ with padding columns (llm.c's 50304 of 50257) agrees with the CPU") {
  // Rows of 50304 bf16 are 16-byte aligned: the packed kernel reads them and must leave the 47
  // padding columns out of the softmax (they hold large values here) and give them gradient 0.
  manual_seed(5);
  constexpr int64_t kClasses = 50257, kPadded = 50304;
  const Tensor values = cat({(randn({4, kClasses}) * 2.0), full({4, kPadded - kClasses}, 1000.0)}, 1).to(kBFloat16);
  const std::vector<int64_t> t = classifier_targets(4, kClasses);
  auto padded_on = [&](Device device) {
    return classifier_run(values, device, [&](const Tensor& logits) {
      return cross_entropy_fused_(logits, tensor(t).to(device), Reduction::Mean, -100, 0.1, kClasses);
    });
  };
  const ClassifierRun cpu = padded_on(kCPU), gpu = padded_on(kCUDA);
  check_close(gpu.loss, cpu.loss, {2e-5, 2e-5});
  const double largest = cpu.grad.to(kFloat64).abs().max().item<double>();
  check_close(gpu.grad.to(kFloat64), cpu.grad.to(kFloat64), {8e-3 * largest, 8e-3});
  CHECK(gpu.grad.narrow(1, kClasses, kPadded - kClasses).to(kFloat32).abs().sum().item<double>() == 0.0);
}

TEST_CASE("cuda cross_entropy_fused_ agrees with cross_entropy on the same device, and with another ignore_index") {
  manual_seed(4);
  const Tensor values = (randn({9, 4096}) * 2.0).to(kBFloat16);
  std::vector<int64_t> t = classifier_targets(9, 4096);
  t[0] = 7, t[4] = 7;
  for (const Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
    CAPTURE(static_cast<int>(reduction));
    const Tensor target = tensor(t).to(kCUDA);
    const ClassifierRun fused = classifier_run(
        values, kCUDA, [&](const Tensor& x) { return cross_entropy_fused_(x, target, reduction, 7, 0.05); });
    const ClassifierRun plain = classifier_run(
        values, kCUDA, [&](const Tensor& x) { return cross_entropy(x.to(kFloat32), target, reduction, 7, 0.05); });
    check_close(fused.loss, plain.loss, {1e-5, 1e-5});
    const double largest = plain.grad.to(kFloat32).abs().max().item<double>();
    check_close(fused.grad.to(kFloat32), plain.grad.to(kFloat32), {8e-3 * largest, 8e-3});
    CHECK(fused.grad.select(0, 0).to(kFloat32).abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("cuda cross_entropy_fused_: the loss of bf16 logits costs no device memory beyond the logits") {
  constexpr int64_t kRows = 1024, kVocab = 50304;
  const int64_t bytes = kRows * kVocab * 2;
  manual_seed(8);
  const Tensor target = randint(0, kVocab, {kRows}).to(kCUDA);
  const Tensor data = randn({kRows, kVocab}).to(kBFloat16).to(kCUDA);
  Tensor w = ones({1}, TensorOptions(kBFloat16).device(kCUDA)).requires_grad_();
  auto extra = [&](bool fused) {
    Tensor logits = data * w;
    cuda::synchronize();
    const int64_t base = cuda::memory_stats().allocated;
    int64_t peak = base;
    {
      amp::AutocastGuard autocast(kCUDA, kBFloat16);
      const Tensor loss = fused ? cross_entropy_fused_(logits, target) : cross_entropy(logits, target);
      peak = std::max(peak, cuda::memory_stats().allocated);
      const Tensor g = autograd::grad({loss}, {logits})[0];
      CHECK(g.dtype() == kBFloat16);
      peak = std::max(peak, cuda::memory_stats().allocated);
    }
    return peak - base;
  };
  // Allocated bytes while the results are alive (the device's peak counter cannot be reset).
  CHECK(extra(true) < bytes / 64);
  CHECK(extra(false) >= bytes);  // cross_entropy's gradient of the logits
}

TEST_CASE("cuda cross_entropy_fused_ reports a bad target at the next synchronisation") {
  const Tensor logits = randn({3, 8}, TensorOptions(kFloat32).device(kCUDA));
  check_error(
      [&] {
        cross_entropy_fused_(logits * 1.0, tensor(std::vector<int64_t>{1, 9, 0}).to(kCUDA)).item<float>();
      },
      {"[cross_entropy]", "9", "out of range"});
}
