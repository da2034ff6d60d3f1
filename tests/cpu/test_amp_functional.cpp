// amp on the functional ops: losses in float32 (cross_entropy included), cat/stack promote,
// softmax passes through on the cpu and honours the cuda row's float32 output dtype.
#include "amp/autocast_hook.h"
#include "framework/op.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("amp: cross_entropy and the other losses run in float32 inside a bfloat16 region") {
  Tensor x = randn({5, 4}), w = randn({4, 3}).requires_grad_();
  Tensor target = tensor(std::vector<int64_t>{0, 1, 2, 0, 1});
  Tensor loss;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    OpRecorder rec;
    Tensor logits = mm(x, w);
    REQUIRE(logits.dtype() == kBFloat16);
    loss = cross_entropy(logits, target);
    CHECK(loss.dtype() == kFloat32);
    bool seen = false;
    for (const OpEvent& e : rec.events()) {
      if (e.name != "cross_entropy") continue;
      seen = true;
      CHECK(e.inputs == std::vector<Dtype>{kFloat32, kInt64});  // logits cast, target untouched
      CHECK(e.outputs == std::vector<Dtype>{kFloat32});
    }
    CHECK(seen);
    Tensor y = randn({5, 3});
    CHECK(mse_loss(logits, y).dtype() == kFloat32);
    CHECK(binary_cross_entropy_with_logits(logits, rand({5, 3})).dtype() == kFloat32);
    CHECK(binary_cross_entropy(sigmoid(logits), rand({5, 3})).dtype() == kFloat32);  // fp32 on cpu
    CHECK(nll_loss(log_softmax(logits.to(kFloat32), 1), target).dtype() == kFloat32);
  }
  loss.backward();
  CHECK(w.grad().dtype() == kFloat32);
}

TEST_CASE("amp: cat and stack promote to the widest dtype, float16 with bfloat16 is an error") {
  Tensor a = randn({2, 3}), b = randn({2, 3}, kBFloat16), h = randn({2, 3}, kFloat16);
  amp::AutocastGuard g(kCPU, kBFloat16);
  CHECK(cat({a, b}).dtype() == kFloat32);
  CHECK(stack({b, b}).dtype() == kBFloat16);
  CHECK(cat({a, b}, 1).shape() == Shape{2, 6});
  check_error([&] { cat({h, b}); }, {"[cat]", "float16 and bfloat16"});
  check_error([&] { stack({h, a, b}); }, {"[stack]", "float16 and bfloat16"});
}

TEST_CASE("amp: softmax passes through on the cpu; its cuda row gives a float32 output") {
  Tensor x = randn({3, 5}, kBFloat16);
  amp::AutocastGuard g(kCPU, kBFloat16);
  CHECK(softmax(x, 1).dtype() == kBFloat16);
  CHECK(log_softmax(randn({3, 5}), 1).dtype() == kFloat32);
  // The cuda row's policy applied to a cpu tensor, through the op itself.
  set_autocast_hook([](const OpDef& op, TensorList in) {
    if (std::string_view(op.name) == "softmax")
      return amp::apply_policy(op.name, amp::policy_for("softmax", kCUDA), kCPU, kBFloat16, std::move(in));
    return amp::autocast_hook(op, std::move(in));
  });
  OpRecorder rec;
  Tensor p = softmax(x, 1);
  set_autocast_hook(&amp::autocast_hook);
  CHECK(p.dtype() == kFloat32);
  CHECK(rec.count("to") == 0);
  hg::test::check_close(sum(p, {1}), ones({3}), {1e-5, 1e-5});
}
