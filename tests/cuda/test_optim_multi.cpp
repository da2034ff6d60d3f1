// Multi-tensor optimizer updates on CUDA: the same run through the per-parameter kernels and the
// multi-tensor ones gives the same bits (parameters, state, warm casts), a device skip flag
// vetoes the step on the device, and a learning rate set after a step was queued reaches the
// next step through the group's hyper tensor without the host waiting.
#include "helpers.h"
#include "optim/warm_cast.h"

using namespace hg;
using hg::test::bitwise_equal;

namespace {

std::unique_ptr<optim::Optimizer> make_cuda_opt(int kind, const TensorList& a, const TensorList& b) {
  switch (kind) {
    case 0:
      return std::make_unique<optim::SGD>(std::vector<optim::SGDParamGroup>{
          {a, {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}}, {b, {.lr = 0.005}}});
    case 1:
      return std::make_unique<optim::SGD>(std::vector<optim::SGDParamGroup>{
          {a, {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.02}}, {b, {.lr = 0.005}}});
    case 2:
      return std::make_unique<optim::Adam>(
          std::vector<optim::AdamParamGroup>{{a, {.lr = 0.01, .weight_decay = 0.01}}, {b, {.lr = 0.001}}});
    case 3:
      return std::make_unique<optim::Adam>(
          std::vector<optim::AdamParamGroup>{{a, {.lr = 0.01, .amsgrad = true}}, {b, {.lr = 0.001, .amsgrad = true}}});
    default:
      return std::make_unique<optim::AdamW>(
          std::vector<optim::AdamWParamGroup>{{a, {.lr = 0.01, .weight_decay = 0.1}}, {b, {.lr = 0.001}}});
  }
}

struct CudaRun {
  TensorList params, warm;
  StateDict state;
};

// Five steps, an ExponentialLR schedule, step 2 vetoed by a device found_inf. Parameters: more
// than one launch table holds (30 small ones), one of several 64K-value chunks, odd sizes (the
// scalar tails), one whose data starts off a 16-byte boundary (the scalar walk), float64 and
// bfloat16 ones in lists of their own.
CudaRun cuda_train(int kind, bool per_param, Dtype warm_dtype) {
  manual_seed(5);
  TensorList a, b;
  for (int i = 0; i < 30; ++i) a.push_back((randn({17 + 3 * i}) * 0.5).to(kCUDA).requires_grad_());
  a.push_back((randn({200003}) * 0.5).to(kCUDA).requires_grad_());
  a.push_back((randn({101}) * 0.5).to(kCUDA).narrow(0, 1, 100).requires_grad_());  // misaligned
  b.push_back((randn({64, 9}) * 0.5).to(kCUDA).requires_grad_());
  b.push_back((randn({50}) * 0.5).to(kCUDA, kFloat64).requires_grad_());
  b.push_back((randn({70}) * 0.5).to(kCUDA, kBFloat16).requires_grad_());
  TensorList all = a;
  all.insert(all.end(), b.begin(), b.end());
  auto opt = make_cuda_opt(kind, a, b);
  opt->set_per_param(per_param);
  optim::ExponentialLR schedule(*opt, 0.7);
  TensorList grads;
  for (int step = 0; step < 5; ++step) {
    manual_seed(50 + step);
    grads.clear();
    for (const Tensor& p : all) grads.push_back(randn(p.shape()).to(kCUDA, p.dtype()));
    const Tensor found_inf = full({1}, step == 2 ? 1.0 : 0.0).to(kCUDA);
    for (size_t i = 0; i < all.size(); ++i) {
      if (warm_dtype != kFloat32) {
        amp::AutocastGuard guard(kCUDA, warm_dtype);
        (void)amp::cast_for_autocast(all[i], warm_dtype);
      }
      all[i].set_grad(grads[i]);
    }
    opt->step(found_inf);
    schedule.step();
  }
  CudaRun out{all, {}, {}};
  for (const Tensor& p : all) {
    const auto warm = optim::warm_cast_of(p);
    out.warm.push_back(warm && warm->value.defined() ? warm->value.to(kCPU) : Tensor());
  }
  out.state = opt->state_dict();
  for (Tensor& p : out.params) p = p.detach().to(kCPU);
  return out;
}

}  // namespace

TEST_CASE("cuda optim multi-tensor: the same run gives the per-parameter kernels' bits") {
  REQUIRE(cuda::is_available());
  for (int kind = 0; kind < 5; ++kind) {
    for (Dtype warm : {kFloat32, kBFloat16, kFloat16}) {
      CAPTURE(kind);
      CAPTURE(dtype_name(warm));
      const CudaRun x = cuda_train(kind, true, warm), y = cuda_train(kind, false, warm);
      for (size_t i = 0; i < x.params.size(); ++i) {
        CAPTURE(i);
        CHECK(bitwise_equal(x.params[i], y.params[i]));
        REQUIRE(x.warm[i].defined() == y.warm[i].defined());
        if (x.warm[i].defined()) CHECK(bitwise_equal(x.warm[i], y.warm[i]));
      }
      REQUIRE(x.state.size() == y.state.size());
      for (const auto& [key, t] : x.state) {
        CAPTURE(key);
        CHECK(bitwise_equal(t.to(kCPU), y.state.at(key).to(kCPU)));
      }
    }
  }
}

TEST_CASE("cuda optim multi-tensor: a lr set after a step was queued is the next step's, with no host sync") {
  REQUIRE(cuda::is_available());
  for (bool adam : {false, true}) {
    CAPTURE(adam);
    Tensor w = ones({1000}).to(kCUDA).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt;
    if (adam)
      opt = std::make_unique<optim::Adam>(TensorList{w}, optim::AdamOptions{.lr = 0.5});
    else
      opt = std::make_unique<optim::SGD>(TensorList{w}, optim::SGDOptions{.lr = 0.5});
    const Tensor g = ones({1000}).to(kCUDA);
    const int64_t syncs = cuda::host_sync_count();
    w.set_grad(g);
    opt->step();  // queued, reads lr 0.5 from the hyper tensor
    opt->set_lr(0.25);
    w.set_grad(g);
    opt->step();  // must read 0.25
    opt->set_lr(0.125);
    w.set_grad(g);
    opt->step();
    CHECK(cuda::host_sync_count() == syncs);
    // SGD: 1 - 0.5 - 0.25 - 0.125. Adam with a constant gradient moves each step by about lr
    // (m / sqrt(v) = 1 after bias correction, eps aside).
    const std::vector<float> got = w.detach().to(kCPU).to_vector<float>();
    for (float x : got) {
      if (adam)
        CHECK(x == doctest::Approx(0.125).epsilon(1e-5));
      else
        CHECK(x == 0.125f);  // exact: every step's lr and result is a power of two's multiple
    }
  }
}
