// copy, fill, binary and unary kernels on CUDA against the CPU kernels on the same inputs.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_cuda_matches_cpu;
using hg::test::cuda_tolerance;
using hg::test::Tolerance;

namespace {
constexpr Dtype kFloats[] = {kFloat32, kFloat16, kBFloat16};
using Inputs = std::vector<Tensor>;
}  // namespace

TEST_CASE("tensors move between the CPU and CUDA unchanged, in every dtype") {
  manual_seed(1);
  const Tensor x = randn({37, 65}, kFloat64) * 3.0;
  for (Dtype d : kAllDtypes) {
    CAPTURE(dtype_name(d));
    const Tensor c = (d == kUInt8 || d == kBool) ? x.abs().to(d) : x.to(d);
    const Tensor g = c.to(kCUDA);
    CHECK(g.device().is_cuda());
    CHECK(g.dtype() == d);
    check_close(g.to(kCPU), c, Tolerance{0, 0});
  }
  // Empty and 0-d tensors.
  CHECK(zeros({0, 3}, kCUDA).to(kCPU).numel() == 0);
  CHECK(scalar_tensor(2.5).to(kCUDA).item<double>() == 2.5);
}

TEST_CASE("copy converts between every pair of dtypes as the CPU does") {
  manual_seed(2);
  const Tensor x = rand({9, 33}, kFloat64) * 5.0;  // non-negative: float -> uint8 is defined
  for (Dtype from : kAllDtypes) {
    for (Dtype to : kAllDtypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      check_cuda_matches_cpu([to](const Inputs& in) { return in[0].to(to); }, {x.to(from)}, Tolerance{0, 0});
    }
  }
}

TEST_CASE("copy handles strided, transposed, offset and broadcast sources") {
  manual_seed(3);
  for (Dtype d : kFloats) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({17, 31}, d);
    auto exact = Tolerance{0, 0};
    check_cuda_matches_cpu([](const Inputs& in) { return in[0].t().contiguous(); }, {x}, exact);
    check_cuda_matches_cpu([](const Inputs& in) { return in[0].slice(1, 1, 31, 3).contiguous(); }, {x}, exact);
    check_cuda_matches_cpu([](const Inputs& in) { return in[0].narrow(1, 1, 29).to(kFloat32); }, {x}, exact);
    check_cuda_matches_cpu(
        [](const Inputs& in) {
          Tensor out = zeros({5, 17, 31}, TensorOptions(kFloat32).device(in[0].device()));
          out.copy_(in[0]);  // broadcast over the leading dim, with conversion
          return out;
        },
        {x}, exact);
    check_cuda_matches_cpu(
        [](const Inputs& in) {
          return in[0].select(1, 4).expand({6, 17}).contiguous();
        },
        {x}, exact);
  }
}

TEST_CASE("fill writes every element of contiguous and strided tensors") {
  for (Dtype d : kAllDtypes) {
    CAPTURE(dtype_name(d));
    check_cuda_matches_cpu(
        [d](const Inputs& in) {
          return full({7, 9}, 1.75, TensorOptions(d).device(in[0].device()));
        },
        {zeros({1})}, Tolerance{0, 0});
    check_cuda_matches_cpu(
        [d](const Inputs& in) {
          Tensor t = zeros({6, 10}, TensorOptions(d).device(in[0].device()));
          t.slice(1, 1, 10, 2).fill_(3.0);
          t.t().narrow(0, 0, 1).zero_();
          return t;
        },
        {zeros({1})}, Tolerance{0, 0});
  }
}

TEST_CASE("binary ops match the CPU with broadcasting, scalars and strided operands") {
  manual_seed(4);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, 2.0); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
  };
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32}) {
    CAPTURE(dtype_name(d));
    // Rounded values so comparisons see equal elements; b kept away from 0 for div.
    const Tensor a = (randn({37, 65}, kFloat64) * 4.0).to(kInt64).to(d);
    const Tensor b = (rand({37, 65}, kFloat64) * 4.0 + 1.0).to(kInt64).to(d);
    const Tolerance tol = cuda_tolerance(d);
    for (const auto& [name, f] : ops) {
      // Integer tensors: no true division, and alpha must be a whole number.
      if (!is_floating(d) && (std::string(name) == "div" || std::string(name) == "add alpha")) continue;
      const std::string op_name = name;  // clang 14 cannot capture a structured binding
      CAPTURE(op_name);
      auto run = [f = f](const Inputs& in) { return f(in[0], in[1]); };
      check_cuda_matches_cpu(run, {a, b}, tol);                                            // contiguous
      check_cuda_matches_cpu(run, {a.narrow(0, 0, 1), b.narrow(1, 0, 1)}, tol);            // [1,65] x [37,1]
      check_cuda_matches_cpu(run, {a, b.narrow(0, 2, 1).narrow(1, 3, 1).squeeze()}, tol);  // tensor x 0-d
      // Views made inside the lambda, so the CUDA side gets them on the device (to() copies
      // views into contiguous tensors): transposed, strided with misaligned starts, and
      // contiguous at an offset of one element (the vector path's unaligned fallback).
      check_cuda_matches_cpu([run](const Inputs& in) { return run({in[0].t(), in[1].t()}); }, {a, b}, tol);
      check_cuda_matches_cpu(
          [run](const Inputs& in) {
            return run({in[0].narrow(1, 1, 63), in[1].narrow(1, 2, 63)});
          },
          {a, b}, tol);
      check_cuda_matches_cpu(
          [run](const Inputs& in) {
            return run({in[0].flatten().narrow(0, 1, 2400), in[1].flatten().narrow(0, 3, 2400)});
          },
          {a, b}, tol);
    }
  }
  // Operators with Python-style scalars, and bool maximum/minimum.
  const Tensor x = randn({129}, kFloat16);
  check_cuda_matches_cpu([](const Inputs& in) { return in[0] * 2.5 + 1.0; }, {x}, cuda_tolerance(kFloat16));
  check_cuda_matches_cpu([](const Inputs& in) { return 1.0 / (in[0] - 7.0); }, {x}, cuda_tolerance(kFloat16));
  const Tensor p = randn({50}) > 0.0, q = randn({50}) > 0.0;
  check_cuda_matches_cpu([](const Inputs& in) { return maximum(in[0], in[1]); }, {p, q}, Tolerance{0, 0});
  check_cuda_matches_cpu([](const Inputs& in) { return minimum(in[0], in[1]); }, {p, q}, Tolerance{0, 0});
}

TEST_CASE("binary ops propagate NaN as the CPU does") {
  const double nan = std::nan("");
  const Tensor a = tensor(std::vector<double>{nan, 1.0, nan, -2.0}).to(kFloat32);
  const Tensor b = tensor(std::vector<double>{0.0, nan, nan, 3.0}).to(kFloat32);
  for (auto f : {+[](const Tensor&x, const Tensor&y) { return maximum(x, y); },
                 +[](const Tensor&x, const Tensor&y) { return minimum(x, y); },
                 +[](const Tensor&x, const Tensor&y) { return add(x, y); }}) {
    check_cuda_matches_cpu([f](const Inputs& in) { return f(in[0], in[1]); }, {a, b}, Tolerance{0, 0});
  }
}

TEST_CASE("unary ops match the CPU in float32, float16 and bfloat16") {
  manual_seed(5);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    bool positive;  // domain needs x > 0
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& t) { return neg(t); }, false},
      {"exp", [](const Tensor& t) { return exp(t); }, false},
      {"log", [](const Tensor& t) { return log(t); }, true},
      {"log1p", [](const Tensor& t) { return log1p(t); }, true},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }, true},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }, true},
      {"reciprocal", [](const Tensor& t) { return reciprocal(t); }, true},
      {"abs", [](const Tensor& t) { return abs(t); }, false},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, false},
      {"tanh", [](const Tensor& t) { return tanh(t); }, false},
      {"relu", [](const Tensor& t) { return relu(t); }, false},
      {"gelu", [](const Tensor& t) { return gelu(t); }, false},
      {"gelu tanh", [](const Tensor& t) { return gelu(t, true); }, false},
      {"softplus", [](const Tensor& t) { return softplus(t, 2.0, 5.0); }, false},
      {"pow", [](const Tensor& t) { return pow(t, 2.5); }, true},
      {"erf", [](const Tensor& t) { return erf(t); }, false},
      {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.2); }, false},
      {"elu", [](const Tensor& t) { return elu(t, 0.7); }, false},
      {"selu", [](const Tensor& t) { return selu(t); }, false},
      {"mish", [](const Tensor& t) { return mish(t); }, false},
      {"hardswish", [](const Tensor& t) { return hardswish(t); }, false},
  };
  for (Dtype d : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype_name(d));
    const Tensor x = randn({33, 70}, kFloat64) * 2.0;
    for (const auto& c : cases) {
      CAPTURE(c.name);
      const Tensor in = (c.positive ? x.abs() + 0.1 : x).to(d);
      auto run = [f = c.f](const Inputs& i) { return f(i[0]); };
      // A few ulps in float32 (CUDA's libm is not glibc's); one ulp of the 16-bit type.
      const Tolerance tol = d == kFloat32 ? Tolerance{1e-5, 1e-5} : cuda_tolerance(d);
      check_cuda_matches_cpu(run, {in}, tol);
      check_cuda_matches_cpu([run](const Inputs& i) { return run({i[0].t()}); }, {in}, tol);  // on the device
      check_cuda_matches_cpu([run](const Inputs& i) { return run({i[0].flatten().narrow(0, 1, 2000)}); }, {in}, tol);
    }
  }
  // Integer neg/abs/relu.
  const Tensor i = (randn({40}, kFloat64) * 10.0).to(kInt32);
  check_cuda_matches_cpu([](const Inputs& in) { return abs(in[0]); }, {i}, Tolerance{0, 0});
  check_cuda_matches_cpu([](const Inputs& in) { return relu(neg(in[0])); }, {i}, Tolerance{0, 0});
}
