// The tape: accumulation, leaf gradients stored without copies but never aliased, retain_graph,
// grad(), retain_grad, detach, version checks, custom functions, dtype of arriving gradients.
#include <pthread.h>

#include <functional>

#include "autograd/node.h"
#include "framework/op.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

TEST_CASE("gradients accumulate in leaves across backward calls") {
  Tensor w = tensor(std::vector<float>{1, 2, 3}).requires_grad_();
  (w * w).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  (w * 3.0).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(w.is_leaf());
  CHECK_FALSE((w * 2.0).is_leaf());
}

TEST_CASE("a tensor used twice gets the sum of both gradients; broadcasting is undone") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor b = tensor(std::vector<float>{10}).requires_grad_();
  ((x * x) + x + b).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 5});
  CHECK(b.grad().shape() == Shape{1});
  CHECK(b.grad().item<float>() == 2.0f);
}

TEST_CASE("a leaf keeps a gradient only the engine holds without copying it") {
  const Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}).reshape({2, 3});
  Tensor w = tensor(std::vector<float>{1, -1, 2, 0.5f, 3, -2}).reshape({3, 2}).requires_grad_();
  Tensor c = tensor(std::vector<float>{1, 2, 3, 4}).reshape({2, 2});
  OpRecorder rec;
  (mm(x, w) * c).sum().backward();
  CHECK(rec.count("clone") == 0);  // mm's fresh weight gradient became w.grad as it is
  CHECK(w.grad().to_vector<float>() == mm(x.t(), c).to_vector<float>());
}

TEST_CASE("a gradient handed to several leaves, or one the user can see, is copied") {
  const Tensor c = tensor(std::vector<float>{1, 2, 3});
  // a + b passes one gradient tensor (the product's, fresh and contiguous) to both leaves.
  Tensor a = zeros({3}).requires_grad_(), b = zeros({3}).requires_grad_();
  ((a + b) * c).sum().backward();
  CHECK(a.grad().storage() != b.grad().storage());
  Tensor(a.grad()).add_(10.0);
  CHECK(b.grad().to_vector<float>() == std::vector<float>{1, 2, 3});
  // x used twice in one op: the second gradient accumulates into a copy of the first.
  Tensor x = zeros({3}).requires_grad_();
  ((x + x) * c).sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 4, 6});
  // Identity and view backwards pass the gradient through: a retained non-leaf gradient and the
  // leaf's must stay independent.
  Tensor y = zeros({3}).requires_grad_();
  Tensor yc = y.clone();
  yc.retain_grad();
  Tensor yv = yc.reshape({3, 1});
  yv.retain_grad();
  (yv * c.reshape({3, 1})).sum().backward();
  CHECK(y.grad().storage() != yc.grad().storage());
  CHECK(yc.grad().storage() != yv.grad().storage());
  Tensor(yc.grad()).mul_(0.0);
  Tensor(yv.grad()).mul_(0.0);
  CHECK(y.grad().to_vector<float>() == std::vector<float>{1, 2, 3});
  // A gradient the user passed in never becomes .grad, through a node or straight into a leaf.
  Tensor g = tensor(std::vector<float>{4, 5, 6});
  Tensor u = zeros({3}).requires_grad_(), v = zeros({3}).requires_grad_(), r = zeros({3}).requires_grad_();
  u.clone().backward(g);
  v.backward(g);
  r.reshape({3, 1}).backward(g.reshape({3, 1}));  // reshape's backward: a new view of g's storage
  g.fill_(0.0);
  CHECK(u.grad().to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(v.grad().to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(r.grad().to_vector<float>() == std::vector<float>{4, 5, 6});
  // cat's backward hands each input a slice (a view) of one gradient.
  Tensor p = zeros({2}).requires_grad_(), q = zeros({1}).requires_grad_();
  (cat({p, q}) * c).sum().backward();
  Tensor(p.grad()).fill_(-1.0);
  CHECK(q.grad().to_vector<float>() == std::vector<float>{3});
  // A later backward accumulates into a new tensor: a gradient the user kept stays as it was.
  const Tensor kept = x.grad();
  ((x * 1.0) * c).sum().backward();
  CHECK(kept.to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 6, 9});
}

TEST_CASE("a sum of gradients only the engine holds is built in place, for a leaf and for a node's input") {
  const Tensor w1 = tensor(std::vector<float>{1, -1, 2, 0.5f, 3, -2}).reshape({3, 2});
  const Tensor w2 = tensor(std::vector<float>{2, 1, 0, -1, 1, 4}).reshape({3, 2});
  Tensor x = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}).reshape({2, 3}).requires_grad_();
  OpRecorder rec;
  // Each mm's backward makes a fresh input gradient: the leaf's two add in place, no new tensor.
  cat({mm(x, w1), mm(x, w2)}).sum().backward();
  CHECK(rec.count("add") == 0);
  const Tensor expected = (mm(ones({2, 2}), w1.t()) + mm(ones({2, 2}), w2.t()));
  CHECK(x.grad().to_vector<float>() == expected.to_vector<float>());
  // A non-leaf used twice: its node's input buffer is summed the same way.
  Tensor z = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}).reshape({2, 3}).requires_grad_();
  Tensor h = z * 2.0;
  rec.clear();
  cat({mm(h, w1), mm(h, w2)}).sum().backward();
  CHECK(rec.count("add") == 0);
  CHECK(z.grad().to_vector<float>() == (expected * 2.0).to_vector<float>());
  // Under create_graph the sum is recorded (out of place), so it has a history.
  Tensor y = tensor(std::vector<float>{1, 2}).requires_grad_();
  const Tensor gy = autograd::grad({((y * y) + (y * y * y)).sum()}, {y}, {}, std::nullopt, true)[0];
  CHECK(gy.requires_grad());
  CHECK(gy.to_vector<float>() == std::vector<float>{2 + 3, 4 + 12});
}

TEST_CASE("backward twice needs retain_graph; non-scalar needs a gradient") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = (x.exp() * 2.0).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  check_error([&] { y.backward(); }, {"second time", "retain_graph"});
  Tensor z = x * 2.0;
  check_error([&] { z.backward(); }, {"[backward]", "scalar", "[2]"});
  z.backward(tensor(std::vector<float>{1, 0.5}));
  check_error([&] { ones({2}).sum().backward(); }, {"[backward]", "does not require grad"});
}

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor h = x * x;
  Tensor y = (h * 3.0).sum();
  TensorList g = autograd::grad({y}, {x, h});
  CHECK(g[0].to_vector<float>() == std::vector<float>{6, 12});
  CHECK(g[1].to_vector<float>() == std::vector<float>{3, 3});
  CHECK_FALSE(x.grad().defined());
  Tensor unused = ones({1}).requires_grad_();
  check_error([&] { autograd::grad({(x * 2.0).sum()}, {unused}); }, {"[grad]", "not used"});
}

TEST_CASE("retain_grad keeps a non-leaf's gradient; detach cuts the graph") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor h = x * 2.0;
  h.retain_grad();
  (h * h).sum().backward();
  CHECK(h.grad().to_vector<float>() == std::vector<float>{4, 8});
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
}

TEST_CASE("modifying a saved tensor in place makes backward throw naming the op") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor a = ones({2});
  Tensor y = (x * a).sum();
  a.add_(1.0);
  check_error([&] { y.backward(); }, {"[mul]", "modified in place"});
}

TEST_CASE("gradients arrive in each tensor's own dtype") {
  Tensor w = ones({2, 2}).requires_grad_();
  Tensor x = ones({3, 2}, kBFloat16);
  Tensor y = mm(x, w.to(kBFloat16));
  y.sum().backward();
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>(4, 3.0f));
}

namespace {
struct Cube : autograd::Function<Cube> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, double scale) {
    ctx->save_for_backward({x});
    ctx->data["scale"] = scale;
    return x * x * x * scale;
  }
  static TensorList backward(autograd::AutogradContext* ctx, const TensorList& g) {
    const Tensor x = ctx->saved()[0];
    return {g[0] * x * x * (3.0 * std::any_cast<double>(ctx->data["scale"]))};
  }
};
}  // namespace

TEST_CASE("custom autograd functions") {
  Tensor x = tensor(std::vector<float>{1, 2}).requires_grad_();
  Tensor y = Cube::apply(x, 2.0);
  CHECK(y.to_vector<float>() == std::vector<float>{2, 16});
  y.sum().backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 24});
  CHECK(autograd::gradcheck([](const TensorList& in) { return Cube::apply(in[0], 0.5); }, {randn({3})}));
}

TEST_CASE("NoGradGuard stops recording; requires_grad_ checks") {
  Tensor w = ones({2}).requires_grad_();
  {
    NoGradGuard ng;
    CHECK_FALSE((w * 2.0).requires_grad());
  }
  CHECK((w * 2.0).requires_grad());
  check_error([] { ones({2}, kInt64).requires_grad_(); }, {"[requires_grad_]", "int64"});
}

TEST_CASE("gradcheck catches a wrong formula") {
  struct Wrong : autograd::Function<Wrong> {
    static Tensor forward(autograd::AutogradContext*, const Tensor& x) { return x * x; }
    static TensorList backward(autograd::AutogradContext*, const TensorList& g) { return {g[0]}; }
  };
  check_error([] { autograd::gradcheck([](const TensorList& in) { return Wrong::apply(in[0]); }, {randn({3})}); },
              {"[gradcheck]", "mismatch"});
}

namespace {
struct TwoGrads : autograd::Function<TwoGrads> {
  static Tensor forward(autograd::AutogradContext*, const Tensor& x) { return x * 2.0; }
  static TensorList backward(autograd::AutogradContext*, const TensorList& g) { return {g[0], g[0]}; }
};
struct Named : autograd::Function<Named> {
  static constexpr const char* name = "MyScale";
  static Tensor forward(autograd::AutogradContext*, const Tensor& x) { return x * 2.0; }
  static TensorList backward(autograd::AutogradContext*, const TensorList& g) { return {g[0], g[0]}; }
};
}  // namespace

TEST_CASE("a custom function's errors name it readably: its own name, else its demangled type") {
  const Tensor x = ones({2}).requires_grad_();
  check_error([&] { TwoGrads::apply(x).sum().backward(); },
              {"[(anonymous namespace)::TwoGrads] backward returned 2 gradients for 1 tensor inputs"});
  check_error([&] { Named::apply(x).sum().backward(); }, {"[MyScale] backward returned 2 gradients"});
}

TEST_CASE("a binary op's backward computes only the gradients its inputs need") {
  const Tensor x = randn({4, 3}).requires_grad_(), c = randn({4, 3}) + 3.0;
  for (const bool constant_first : {false, true}) {
    CAPTURE(constant_first);
    for (const char* op : {"mul", "div", "sub"}) {
      CAPTURE(op);
      const std::string name = op;
      Tensor y;
      if (name == "mul") y = constant_first ? c * x : x * c;
      if (name == "div") y = constant_first ? c / x : x / c;
      if (name == "sub") y = constant_first ? c - x : x - c;
      x.set_grad(Tensor());
      OpRecorder rec;
      y.sum().backward();
      // One formula's worth of ops for x's gradient, none for the constant's.
      const size_t ops = rec.count("mul", true) + rec.count("div", true) + rec.count("neg", true);
      const size_t expected = name == "mul" ? 1 : name == "div" ? (constant_first ? 4 : 1) : (constant_first ? 1 : 0);
      CHECK(ops == expected);
      // And the gradient itself is right.
      Tensor expected_grad;
      {
        NoGradGuard no_grad;
        if (name == "mul") expected_grad = c;
        if (name == "div") expected_grad = constant_first ? -c / (x * x) : 1.0 / c;
        if (name == "sub") expected_grad = full({4, 3}, constant_first ? -1.0 : 1.0);
      }
      hg::test::check_close(x.grad(), expected_grad);
    }
  }
}

namespace {
// Runs fn on a thread with a 1 MiB stack: a teardown that recursed once per node would overflow it
// at chain lengths a test can afford (the main thread's 8 MiB took 174k nodes of y = y * 1.0).
void on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{1} << 20);
  pthread_t thread;
  const auto run = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, run, const_cast<std::function<void()>*>(&fn)) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}
}  // namespace

TEST_CASE("graphs are freed without recursion: a chain of a million nodes, and one of ops before and after backward") {
  // A million bare nodes, each pointing at the one before (about 300 MB, under a second).
  on_small_stack([] {
    std::shared_ptr<autograd::Node> last;
    for (int i = 0; i < 1'000'000; ++i) {
      std::vector<autograd::Edge> edges(1);
      edges[0].node = std::move(last);
      last = std::make_shared<autograd::Node>("link", std::move(edges), BackwardFn(),
                                              std::vector<autograd::Node::OutputMeta>{}, AutocastState{});
    }
  });
  // The reported case, y = y * 1.0, whose nodes also hold the previous node through the saved y;
  // dropped as it is, and after a backward through it.
  constexpr int kOps = 50'000;
  Tensor x = ones({1}).requires_grad_();
  bool has_history = false;
  on_small_stack([&] {
    Tensor y = x;
    for (int i = 0; i < kOps; ++i) y = y * 1.0;
    has_history = y.grad_fn() != nullptr;
    y = x;
    for (int i = 0; i < kOps; ++i) y = y * 1.0;
    y.sum().backward();
  });
  CHECK(has_history);
  CHECK(x.grad().item<float>() == 1.0f);
}

TEST_CASE("a chain of views of views is made in linear time and freed without recursion") {
  // Each view of a view keeps how to replay itself on its base: 200k of them are built, freed,
  // and once (at a smaller depth) replayed by an in-place op and differentiated through.
  Tensor x = ones({4}).requires_grad_();
  on_small_stack([&] {
    Tensor y = x * 1.0;
    for (int i = 0; i < 200'000; ++i) y = y.view({4});
    CHECK(y.grad_fn() != nullptr);
  });
  on_small_stack([&] {
    Tensor base = x * 2.0;
    Tensor y = base;
    for (int i = 0; i < 2'000; ++i) y = y.view({2, 2}).view({4});
    y.narrow(0, 1, 2).mul_(3.0);  // through the chain onto base's history
    base.sum().backward();
  });
  CHECK(x.grad().to_vector<float>() == std::vector<float>({2, 6, 6, 2}));
}
