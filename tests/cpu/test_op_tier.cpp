// The internal op tier and the outermost-op autocast rule: ops build their insides without
// recording extra events, a nested public op does not autocast again but still records autograd,
// and backward kernels are recorded (marked backward) for every op family.
#include "framework/op.h"
#include "helpers.h"

using namespace hg;

TEST_CASE("nn::Linear records one op event forward, plus only the casts under autocast") {
  manual_seed(3);
  nn::Linear layer(4, 3);
  const Tensor x = randn({2, 5, 4});
  {
    OpRecorder rec;
    (void)layer.forward(x);
    REQUIRE(rec.events().size() == 1);
    CHECK(rec.events()[0].name == "linear");
  }
  {
    OpRecorder rec;
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    const Tensor y = layer.forward(x);
    CHECK(y.dtype() == kBFloat16);
    CHECK(rec.count("linear") == 1);
    CHECK(rec.count("to") == 3);  // x, weight, bias
    CHECK(rec.events().size() == 4);
  }
}

TEST_CASE("an op called inside another op does not autocast again but still records autograd") {
  const Tensor a = randn({3, 4}).requires_grad_(), b = randn({4, 2}).requires_grad_();
  amp::AutocastGuard autocast(kCPU, kBFloat16);
  CHECK(OpCall::depth() == 0);
  CHECK(mm(a, b).dtype() == kBFloat16);  // outermost: autocast applies
  Tensor inner;
  {
    OpCall outer(*find_op("linear"), {});
    CHECK(OpCall::depth() == 1);
    inner = mm(a, b);  // nested: runs in the dtypes it is given
  }
  CHECK(OpCall::depth() == 0);
  CHECK(inner.dtype() == kFloat32);
  REQUIRE(inner.grad_fn() != nullptr);
  inner.sum().backward();
  CHECK(a.grad().defined());
}

TEST_CASE("backward kernels of softmax, log_softmax, cross_entropy, nll_loss, relu and gelu are recorded as backward") {
  const Tensor x = randn({4, 5}).requires_grad_();
  const Tensor target = tensor(std::vector<int64_t>{0, 3, 1, 4});
  const struct {
    const char* name;
    std::function<Tensor()> loss;
  } cases[] = {
      {"softmax_backward", [&] { return softmax(x, 1).sum(); }},
      {"log_softmax_backward", [&] { return log_softmax(x, 1).sum(); }},
      {"cross_entropy_backward", [&] { return cross_entropy(x, target); }},
      {"nll_loss_backward", [&] { return nll_loss(log_softmax(x, 1), target); }},
      {"relu_backward", [&] { return relu(x).sum(); }},
      {"gelu_backward", [&] { return gelu(x).sum(); }},
      {"gelu_backward", [&] { return gelu(x, true).sum(); }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const Tensor loss = c.loss();
    OpRecorder rec;
    loss.backward();
    CHECK(rec.count(c.name, true) == 1);
    CHECK(rec.count(c.name, false) == 0);
    for (const OpEvent& e : rec.events()) CHECK_MESSAGE(e.backward, e.name << " ran in backward but is not marked so");
  }
}

TEST_CASE("internal reshapes and casts inside ops record no events") {
  const Tensor x = randn({3, 4}).t();  // not contiguous: sum and softmax copy it internally
  OpRecorder rec;
  (void)sum(x, {0});
  (void)softmax(x, 1);
  (void)cross_entropy(x, tensor(std::vector<int64_t>{0, 1, 2, 0}));
  std::vector<std::string> names;
  for (const OpEvent& e : rec.events()) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{"sum", "softmax", "cross_entropy"});
}
