// A float32 weight used by linear under autocast gets its gradient written as float32 in one
// pass (widened_gradient_wanted, framework/op.h) where nothing else can see the 16-bit gradient:
// bit for bit what the cast back gives, and the cast taken whenever something could see it.
#include "framework/op.h"
#include "helpers.h"
#include "kernels/cpu/conv/onednn.h"

using namespace hg;

namespace {
// Backward events of "to" from `from` to float32: the casts of gradients back to float32.
size_t casts_back(const OpRecorder& rec, Dtype from) {
  size_t n = 0;
  for (const OpEvent& e : rec.events())
    if (e.name == "to" && e.backward && e.inputs == std::vector<Dtype>{from} &&
        e.outputs == std::vector<Dtype>{kFloat32})
      ++n;
  return n;
}

// The weight gradient as the unfused path computes it: the 16-bit product, then cast.
Tensor expected_weight_grad(const Tensor& upstream, const Tensor& x, Dtype d) {
  NoGradGuard no_grad;
  return mm(upstream.to(d).t(), x.to(d)).to(kFloat32);
}

struct Layer {
  Tensor w, b;
  Layer(int64_t out, int64_t in) {
    w = (randn({out, in}) * 0.05).detach().requires_grad_();
    b = (randn({out}) * 0.05).detach().requires_grad_();
  }
};

// linear(x, l.w, l.b) under autocast to d, summed against upstream, then backward: the float32
// weight's gradient arrives widened, bit for bit the cast path's values.
void check_widened_weight_grad(const Layer& l, const Tensor& x, const Tensor& upstream, Dtype d) {
  Tensor loss;
  {
    amp::AutocastGuard g(kCPU, d);
    loss = (linear(x, l.w, l.b).to(kFloat32) * upstream).sum();
  }
  OpRecorder rec;
  loss.backward();
  CHECK(l.w.grad().dtype() == kFloat32);
  CHECK(l.w.grad().to_vector<float>() == expected_weight_grad(upstream, x, d).to_vector<float>());
  // Only the bias's gradient (a column sum) was cast back; the weight's went on widened, an mm
  // the recorder sees (16-bit operands, a float32 result) with its time.
  CHECK(casts_back(rec, d) == 1);
  size_t widened_mm = 0;
  for (const OpEvent& e : rec.events())
    if (e.name == "mm" && e.backward && e.inputs == std::vector<Dtype>{d, d} &&
        e.outputs == std::vector<Dtype>{kFloat32}) {
      ++widened_mm;
      CHECK(e.micros > 0);
    }
  CHECK(widened_mm == 1);
}
}  // namespace

TEST_CASE("amp: linear's weight gradient reaches .grad in float32 in one pass, bit for bit the cast's values") {
  // Batch 16: the short-inner kernel writes the float32 form itself; batch 40: the product is
  // computed in 16 bits and widened inside the same kernel call.
  manual_seed(31);
  for (Dtype d : {kBFloat16, kFloat16}) {
    for (const int64_t batch : {16, 40}) {
      CAPTURE(dtype_name(d));
      CAPTURE(batch);
      Layer l(400, 300);
      const Tensor x = randn({batch, 300}), upstream = randn({batch, 400});
      check_widened_weight_grad(l, x, upstream, d);
    }
  }
}

TEST_CASE("amp: a classifier's weight gradient (few outputs, the narrow kernel) reaches .grad widened, bit for bit") {
  // [10, 64] @ [64, 784]: few rows of g^T against a large x, summed by the narrow kernel along
  // x's rows (a float32 x, which autocast casts to a contiguous copy) or as dot products along
  // its columns (x already 16-bit, a transposed view, used as it is).
  manual_seed(34);
  for (Dtype d : {kBFloat16, kFloat16}) {
    for (const bool transposed : {false, true}) {
      CAPTURE(dtype_name(d));
      CAPTURE(transposed);
      Layer l(10, 784);
      const Tensor x = transposed ? randn({784, 64}).to(d).t() : randn({64, 784});
      const Tensor upstream = randn({64, 10});
      check_widened_weight_grad(l, x, upstream, d);
    }
  }
}

TEST_CASE("amp: the weight gradient is cast as before when something else could see it") {
  manual_seed(32);
  const Dtype d = kBFloat16;
  const Tensor x = randn({16, 300}), x2 = randn({16, 300}), upstream = randn({16, 400});

  SUBCASE("the weight used twice in the region: both gradients summed in bfloat16 first") {
    Layer l(400, 300);
    Tensor loss;
    {
      amp::AutocastGuard g(kCPU, d);
      loss = ((linear(x, l.w, l.b) + linear(x2, l.w, l.b)).to(kFloat32) * upstream).sum();
    }
    OpRecorder rec;
    loss.backward();
    NoGradGuard no_grad;
    const Tensor g16 = upstream.to(d);
    const Tensor sum16 = mm(g16.t(), x.to(d)) + mm(g16.t(), x2.to(d));
    CHECK(l.w.grad().to_vector<float>() == sum16.to(kFloat32).to_vector<float>());
    CHECK(casts_back(rec, d) == 2);
  }
  SUBCASE("create_graph: the recorded formulas keep the cast") {
    Layer l(400, 300);
    Tensor loss;
    {
      amp::AutocastGuard g(kCPU, d);
      loss = (linear(x, l.w, l.b).to(kFloat32) * upstream).sum();
    }
    OpRecorder rec;
    loss.backward({}, std::nullopt, true);
    CHECK(l.w.grad().to_vector<float>() == expected_weight_grad(upstream, x, d).to_vector<float>());
    CHECK(casts_back(rec, d) == 2);
  }
  SUBCASE("a hook or retain_grad on the 16-bit weight sees a 16-bit gradient") {
    Layer l(400, 300);
    const Tensor w16 = l.w.to(d);
    Dtype seen = kFloat64;
    RemovableHandle h = w16.register_hook([&](const Tensor& g) { seen = g.dtype(); });
    Tensor w16_retained = l.w.to(d);
    w16_retained.retain_grad();
    const Tensor b16 = l.b.to(d);  // one cast, two uses: its gradients are summed, then cast once
    const Tensor y = linear(x.to(d), w16, b16) + linear(x2.to(d), w16_retained, b16);
    OpRecorder rec;
    (y.to(kFloat32) * upstream).sum().backward();
    CHECK(seen == d);
    CHECK(w16_retained.grad().dtype() == d);
    CHECK(casts_back(rec, d) == 3);  // both weight casts and the bias's
  }
  SUBCASE("grad() of the 16-bit weight itself returns it in its dtype") {
    Layer l(400, 300);
    const Tensor w16 = l.w.to(d);
    const Tensor loss = (linear(x.to(d), w16, l.b.to(d)).to(kFloat32) * upstream).sum();
    const TensorList g = autograd::grad({loss}, {w16});
    CHECK(g[0].dtype() == d);
    CHECK(g[0].to(kFloat32).to_vector<float>() == expected_weight_grad(upstream, x, d).to_vector<float>());
  }
  SUBCASE("grad() of the float32 weight: widened, the same values") {
    Layer l(400, 300);
    Tensor loss;
    {
      amp::AutocastGuard g(kCPU, d);
      loss = (linear(x, l.w, l.b).to(kFloat32) * upstream).sum();
    }
    const TensorList g = autograd::grad({loss}, {l.w});
    CHECK(g[0].dtype() == kFloat32);
    CHECK(g[0].to_vector<float>() == expected_weight_grad(upstream, x, d).to_vector<float>());
    CHECK_FALSE(l.w.grad().defined());
  }
}

TEST_CASE("amp: widened weight gradients accumulate over micro-batches and train as before") {
  // Two backward passes into the same .grad (the second adds in float32), against the cast path
  // values; then SGD steps give the same weights as steps on the expected gradients.
  manual_seed(33);
  const Dtype d = kFloat16;
  Layer l(400, 300);
  const Tensor x = randn({8, 300}), upstream = randn({8, 400});
  for (int micro = 0; micro < 2; ++micro) {
    Tensor loss;
    {
      amp::AutocastGuard g(kCPU, d);
      loss = (linear(x, l.w, l.b).to(kFloat32) * upstream).sum();
    }
    loss.backward();
  }
  const Tensor once = expected_weight_grad(upstream, x, d);
  CHECK(l.w.grad().to_vector<float>() == (once + once).to_vector<float>());
}

TEST_CASE(
    "amp: conv2d's bfloat16 weight gradient reaches .grad widened, bit for bit the cast's values, NCHW and "
    "channels-last, in one chunk and several") {
  // One sample is one chunk: the float32 .grad is written as oneDNN's rounded blocks are unblocked.
  // Four samples on several threads are several chunks: the bfloat16 gradient is made, then widened.
  // Either way the values are the unfused path's (conv2d on explicit bfloat16 casts, then .to).
  // Images of 8x8 take bfloat16 Winograd where this CPU has it (its float32 sums rounded into the
  // float32 .grad), 4x4 ones the batched GEMM, 6x6 oneDNN's direct kernel (conv/algorithm.h).
  manual_seed(35);
  for (const int64_t side : {6, 8, 4}) {
    for (const int64_t n : {1, 4}) {
      for (const bool cl : {false, true}) {
        CAPTURE(side);
        CAPTURE(n);
        CAPTURE(cl);
        const MemoryFormat fmt = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
        const Tensor x = randn({n, 32, side, side}).contiguous(fmt), upstream = randn({n, 48, side, side});
        Tensor w = (randn({48, 32, 3, 3}) * 0.1).contiguous(fmt).requires_grad_();
        Tensor loss;
        {
          amp::AutocastGuard g(kCPU, kBFloat16);
          loss = (conv2d(x, w, Tensor(), {1}, {1}).to(kFloat32) * upstream).sum();
        }
        OpRecorder rec;
        loss.backward();
        REQUIRE(w.grad().dtype() == kFloat32);
        CHECK(casts_back(rec, kBFloat16) == 0);  // the weight's cast back was skipped
        // The unfused path: the 16-bit weight's gradient, cast back by the caller.
        Tensor w16 = w.detach().to(kBFloat16).requires_grad_();
        (conv2d(x.to(kBFloat16), w16, Tensor(), {1}, {1}).to(kFloat32) * upstream).sum().backward();
        const Tensor want = w16.grad().to(kFloat32);
        if (cpu::onednn_conv2d_applies(x.to(kBFloat16))) {
          CHECK(w.grad().contiguous().to_vector<float>() == want.contiguous().to_vector<float>());
        } else {
          // conv.cpp's own loops hand samples to threads as they come, so two runs may add the
          // float32 sums in different orders: the same values up to that, one bfloat16 rounding.
          test::check_close(w.grad(), want, test::tolerance(kBFloat16));
        }
        // Either way .grad holds bfloat16 values, as the cast back would have made them.
        CHECK(test::bitwise_equal(w.grad().to(kBFloat16).to(kFloat32), w.grad()));
      }
    }
  }
}
