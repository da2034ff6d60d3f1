// conv2d_relu, the fused convolution + ReLU: the same values and gradients as relu(conv2d(...))
// in every float dtype and geometry, its gradcheck, its autocast row and recorder events, its
// errors, and nn::Sequential's use of it (only for a hook-free Conv2d then ReLU).
#include <cmath>
#include <cstring>

#include "helpers.h"

using namespace hg;
using hg::test::bitwise_equal;
using hg::test::check_close;
using hg::test::check_error;
using hg::test::Tolerance;

namespace {

struct ConvReluCase {
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

const std::vector<ConvReluCase> kConvReluCases = {
    {{2, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},    // same padding
    {{2, 3, 9, 7}, {5, 3, 3, 2}, {2, 1}, {1, 0}, {1, 1}, 1},    // stride, rectangular kernel
    {{1, 2, 10, 9}, {3, 2, 3, 3}, {1, 2}, {2, 1}, {2, 3}, 1},   // dilation
    {{2, 4, 6, 6}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},    // groups
    {{2, 6, 5, 4}, {3, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},    // 1x1 (no packing)
    {{4, 1, 28, 28}, {8, 1, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},  // MNIST first layer
};

Tensor relu_of_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvReluCase& g) {
  return relu(conv2d(x, w, b, g.stride, g.padding, g.dilation, g.groups));
}
Tensor conv2d_relu_of(const Tensor& x, const Tensor& w, const Tensor& b, const ConvReluCase& g) {
  return conv2d_relu(x, w, b, g.stride, g.padding, g.dilation, g.groups);
}

}  // namespace

TEST_CASE("conv2d_relu gives relu(conv2d) in every float dtype and geometry, forward and backward") {
  manual_seed(11);
  for (Dtype d : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(d));
    for (const ConvReluCase& g : kConvReluCases) {
      CAPTURE(g.x);
      CAPTURE(g.w);
      for (bool with_bias : {true, false}) {
        CAPTURE(with_bias);
        const Tensor x0 = randn(g.x).to(d), w0 = (randn(g.w) * 0.5).to(d);
        const Tensor b0 = with_bias ? randn({g.w[0]}).to(d) : Tensor();
        const auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().requires_grad_() : Tensor(); };
        Tensor x1 = leaf(x0), w1 = leaf(w0), b1 = leaf(b0), x2 = leaf(x0), w2 = leaf(w0), b2 = leaf(b0);
        const Tensor y1 = relu_of_conv2d(x1, w1, b1, g), y2 = conv2d_relu_of(x2, w2, b2, g);
        const Tensor gy = randn(y1.shape()).to(d);
        (y1 * gy).sum().backward();
        (y2 * gy).sum().backward();
        CHECK(bitwise_equal(y2, y1));
        CHECK(bitwise_equal(x2.grad(), x1.grad()));
        // The weight and bias gradients add per-thread partial sums in the order the threads
        // finish (conv2d's own, run to run), so they agree to rounding, not bit for bit.
        const Tolerance tol = d == kFloat64   ? Tolerance{1e-12, 1e-12}
                              : d == kFloat32 ? Tolerance{1e-5, 1e-5}
                                              : Tolerance{2e-2, 2e-2};
        check_close(w2.grad(), w1.grad(), tol);
        if (with_bias) check_close(b2.grad(), b1.grad(), tol);
      }
    }
  }
}

TEST_CASE("conv2d_relu keeps NaN, zeroes negatives, and takes unbatched and strided inputs") {
  const Tensor w = ones({1, 1, 1, 1});
  const Tensor x = tensor(std::vector<float>{-2.0f, 0.0f, 3.0f, NAN}, {1, 1, 2, 2});
  const auto v = conv2d_relu(x, w).to_vector<float>();
  CHECK(v[0] == 0.0f);
  CHECK(!std::signbit(v[0]));  // +0, as relu
  CHECK(v[1] == 0.0f);
  CHECK(v[2] == 3.0f);
  CHECK(std::isnan(v[3]));
  manual_seed(12);
  const Tensor img = randn({3, 9, 9}), wt = randn({4, 3, 3, 3}), b = randn({4});
  CHECK(bitwise_equal(conv2d_relu(img, wt, b, {1}, {1}), relu(conv2d(img, wt, b, {1}, {1}))));
  const Tensor big = randn({2, 6, 9, 9});
  const Tensor strided = big.slice(1, 0, 6, 2);
  CHECK(bitwise_equal(conv2d_relu(strided, wt, b, {2}, {0}), relu(conv2d(strided.contiguous(), wt, b, {2}, {0}))));
  CHECK(conv2d_relu(zeros({0, 3, 9, 9}), wt, b).shape() == Shape{0, 4, 7, 7});
}

TEST_CASE("conv2d_relu gradients: gradcheck and gradgradcheck") {
  // Fixed seed: no output lands within a finite-difference step of ReLU's kink.
  manual_seed(13);
  const TensorList inputs = {randn({2, 2, 5, 5}), randn({3, 2, 3, 3}), randn({3})};
  const auto fn = [](const TensorList& t) { return conv2d_relu(t[0], t[1], t[2], {1, 1}, {1, 1}); };
  CHECK(autograd::gradcheck(fn, inputs));
  CHECK(autograd::gradgradcheck(fn, inputs));
}

TEST_CASE("conv2d_relu records itself and conv2d_backward, and runs in bfloat16 under autocast") {
  Tensor x = randn({2, 3, 8, 8}), w = (randn({4, 3, 3, 3}) * 0.2).detach().requires_grad_();
  Tensor b = zeros({4}).requires_grad_();
  Tensor loss;
  {
    amp::AutocastGuard g(kCPU, kBFloat16);
    OpRecorder rec;
    const Tensor y = conv2d_relu(x, w, b, {1, 1}, {1, 1});
    CHECK(y.dtype() == kBFloat16);
    CHECK(rec.count("conv2d_relu", false) == 1);
    CHECK(rec.count("relu") == 0);
    for (const OpEvent& e : rec.events())
      if (e.name == "conv2d_relu") CHECK(e.inputs == std::vector<Dtype>{kBFloat16, kBFloat16, kBFloat16});
    loss = y.to(kFloat32).sum();
  }
  OpRecorder rec;
  loss.backward();
  // The CPU makes the ReLU's gradient inside conv2d_backward's passes (conv2d_relu_backward_stub),
  // a few samples at a time: no relu_backward over the whole output.
  CHECK(rec.count("relu_backward", true) == 0);
  CHECK(rec.count("conv2d_backward", true) == 1);
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(b.grad().dtype() == kFloat32);
}

TEST_CASE("conv2d_relu errors name conv2d_relu") {
  const Tensor x = zeros({2, 3, 8, 8});
  check_error([&] { conv2d_relu(x, zeros({4, 2, 3, 3})); }, {"[conv2d_relu]", "[2, 3, 8, 8]", "channels"});
  check_error([&] { conv2d_relu(x, zeros({4, 3, 3, 3}), zeros({5})); }, {"[conv2d_relu]", "bias", "[5]"});
  check_error([&] { conv2d_relu(x, zeros({4, 3, 3, 3}), Tensor(), {1, 1, 1}); }, {"[conv2d_relu]", "stride"});
}

namespace {
// A Conv2d whose forward differs from its class's: Sequential must not replace it by conv2d_relu.
class ShiftedConv2d : public nn::Conv2d {
 public:
  using nn::Conv2d::Conv2d;
  Tensor forward(const Tensor& x) override { return nn::Conv2d::forward(x) - 1.0; }
};

std::shared_ptr<nn::Sequential> conv_relu_model(std::shared_ptr<nn::Module> first) {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::move(first))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::AvgPool2d>(2))  // a MaxPool2d(2) would join the fused op
      .push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(4 * 3 * 3, 2));
  return model;
}
}  // namespace

TEST_CASE("nn::fuse runs a hook-free Conv2d + ReLU as conv2d_relu, with the same output and gradients") {
  manual_seed(14);
  auto model = conv_relu_model(std::make_shared<nn::Conv2d>(2, 4, 3));
  const Tensor x = randn({3, 2, 8, 8});
  OpRecorder rec;
  // Nothing is fused until the model asks for it.
  const Tensor y_plain = (*model)(x);
  CHECK(rec.count("conv2d_relu") == 0);
  CHECK(rec.count("conv2d") == 1);
  CHECK(nn::fuse(*model) == std::vector<std::string>{": 0+1 -> conv2d_relu"});
  rec.clear();
  const Tensor y = (*model)(x);
  CHECK(bitwise_equal(y, y_plain));
  CHECK(rec.count("conv2d_relu") == 1);
  CHECK(rec.count("conv2d") == 0);
  CHECK(rec.count("relu") == 0);
  y.sum().backward();
  const Tensor wgrad = model->parameters()[0].grad().clone();

  // The same model with a forward hook on the ReLU: unfused, and the hook sees conv2d's output.
  model->zero_grad();
  Tensor seen_input;
  auto handle = (*model)[1]->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor&) {
    seen_input = in;
    return std::optional<Tensor>();
  });
  rec.clear();
  const Tensor y_hooked = (*model)(x);
  CHECK(rec.count("conv2d") == 1);
  CHECK(rec.count("relu") == 1);
  CHECK(rec.count("conv2d_relu") == 0);
  REQUIRE(seen_input.defined());
  CHECK(seen_input.min().item<double>() < 0);  // the pre-ReLU values
  CHECK(bitwise_equal(y_hooked, y));
  y_hooked.sum().backward();
  check_close(model->parameters()[0].grad(), wgrad, Tolerance{1e-5, 1e-5});  // partial sums: see above
  handle.remove();
  rec.clear();
  (*model)(x);
  CHECK(rec.count("conv2d_relu") == 1);

  // A subclass of Conv2d keeps its own forward.
  auto shifted = conv_relu_model(std::make_shared<ShiftedConv2d>(2, 4, 3));
  CHECK(nn::fuse(*shifted).empty());
  rec.clear();
  (*shifted)(x);
  CHECK(rec.count("conv2d_relu") == 0);
  CHECK(rec.count("conv2d") == 1);
}

namespace {
// A model written as a custom Module, with a Sequential inside it: nn::fuse finds it by name.
struct TwoStage : nn::Module {
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Linear> head;
  TwoStage() : Module("TwoStage") {
    features =
        register_module("features", nn::sequential(std::make_shared<nn::Conv2d>(2, 4, 3), std::make_shared<nn::ReLU>(),
                                                   std::make_shared<nn::MaxPool2d>(2)));
    head = register_module("head", std::make_shared<nn::Linear>(4 * 3 * 3, 2));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*features)(x).flatten(1)); }
};
}  // namespace

TEST_CASE("nn::fuse reaches the Sequentials inside a custom Module and names what it fused") {
  manual_seed(15);
  TwoStage model;
  const Tensor x = randn({2, 2, 8, 8});
  const Tensor plain = model(x);
  CHECK(nn::fuse(model) == std::vector<std::string>{"features: 0+1+2 -> conv2d_relu_max_pool2d"});
  OpRecorder rec;
  const Tensor fused = model(x);
  CHECK(rec.count("conv2d_relu_max_pool2d") == 1);
  CHECK(bitwise_equal(fused, plain));
  // A hook added after fuse() unfuses the run: the plan is checked at every call.
  (*model.features)[1]->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor&) { return std::optional<Tensor>(); });
  rec.clear();
  model(x);
  CHECK(rec.count("conv2d_relu_max_pool2d") == 0);
  CHECK(rec.count("conv2d") == 1);
}
