// Collectives on CUDA tensors (the NCCL backend) and DDP on CUDA parameters, in a group of one:
// what one GPU can check. The communicator is set up, each collective runs on halfgrad's stream
// after the kernels that made its input, and results land where they should. All-gather and
// reduce-scatter write a separate output, so a call that did nothing would fail here; sums across
// ranks need several GPUs and are checked on the CPU backends by the distributed suite.
#include "distributed/process_group.h"
#include "helpers.h"
#include "nn/distributed.h"

using namespace hg;
using hg::test::check_error;
namespace dist = hg::distributed;

namespace {

std::shared_ptr<dist::ProcessGroup> group() { return dist::ProcessGroup::init({.timeout_s = 60}); }

}  // namespace

#ifdef HG_WITH_NCCL

namespace {

std::shared_ptr<nn::Sequential> make_mlp() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(6, 16));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(16, 3));
  return m;
}

std::vector<float> host(const Tensor& t) { return t.to(kCPU).to(kFloat32).to_vector<float>(); }

}  // namespace

TEST_CASE("NCCL collectives on CUDA tensors in a group of one") {
  auto pg = group();
  REQUIRE(pg->world_size() == 1);
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    // Made by a kernel just before the collective: stream order must put the kernel first.
    const Tensor base = arange(0, 8, 1, TensorOptions(kFloat32)).to(kCUDA).to(d);
    Tensor x = base * 2.0;
    pg->all_reduce(x, dist::ReduceOp::Sum).wait();
    CHECK(host(x) == host(base * 2.0));
    pg->all_reduce(x, dist::ReduceOp::Max, dist::Accumulate::Native).wait();
    CHECK(host(x) == host(base * 2.0));
    pg->broadcast(x, 0).wait();
    CHECK(host(x) == host(base * 2.0));

    Tensor gathered = zeros({1, 8}, TensorOptions(d).device(kCUDA));
    pg->all_gather(gathered, base + 1.0).wait();
    CHECK(host(gathered) == host(base + 1.0));
    Tensor scattered = zeros({8}, TensorOptions(d).device(kCUDA));
    pg->reduce_scatter(scattered, base * 3.0, dist::ReduceOp::Avg).wait();
    CHECK(host(scattered) == host(base * 3.0));
  }
  pg->barrier().wait();
  // Asynchronous: several in flight, waited in any order.
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (int i = 0; i < 4; ++i) {
    Tensor out = zeros({1, 1000}, kCUDA);
    works.push_back(pg->all_gather(out, full({1000}, i, kCUDA)));
    ts.push_back(out);
  }
  for (int i = 3; i >= 0; --i) works[i].wait();
  for (int i = 0; i < 4; ++i) CHECK(ts[i].sum().item<float>() == 1000.0f * i);

  check_error([&] { pg->all_gather(zeros({1, 8}), ones({8}, kCUDA)).wait(); }, {"all_gather", "share a device"});
}

TEST_CASE("DDP on CUDA parameters: gradients reduced through NCCL, bf16 compression rounds them") {
  auto pg = group();
  manual_seed(3);
  const Tensor x = randn({5, 6}).to(kCUDA), y = randn({5, 3}).to(kCUDA);
  for (bool compress : {false, true}) {
    CAPTURE(compress);
    manual_seed(11);
    auto model = make_mlp();
    model->to(kCUDA);
    manual_seed(11);
    auto ref = make_mlp();
    ref->to(kCUDA);
    nn::DistributedDataParallelOptions options{.bucket_cap_bytes = 200};
    if (compress) options.reduce_dtype = kBFloat16;
    nn::DistributedDataParallel ddp(model, pg, options);
    REQUIRE(ddp.bucket_indices().size() > 1);
    mse_loss(ddp(x), y).backward();
    mse_loss((*ref)(x), y).backward();
    auto p = model->parameters(), q = ref->parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      REQUIRE(p[i].grad().device().is_cuda());
      // One rank: the average is the gradient itself, or its bf16 rounding when compressed.
      const Tensor expected = compress ? q[i].grad().to(kBFloat16).to(kFloat32) : q[i].grad();
      CHECK(host(p[i].grad()) == host(expected));
    }
  }
}

TEST_CASE("a GradScaler with a process group trains a CUDA model under fp16 autocast") {
  auto pg = group();
  manual_seed(4);
  auto model = make_mlp();
  model->to(kCUDA);
  nn::DistributedDataParallel ddp(model, pg);
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  amp::GradScaler scaler(kCUDA, {.init_scale = 1024.0, .process_group = pg});
  const Tensor x = randn({16, 6}).to(kCUDA), y = randn({16, 3}).to(kCUDA);
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(kCUDA, kFloat16);
      loss = mse_loss(ddp(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    (step == 0 ? first : last) = loss.item<float>();
  }
  CHECK(last < first);
  CHECK(scaler.get_scale() == 1024.0);  // no overflow in this small model
}

#else

TEST_CASE("without NCCL, a collective on a CUDA tensor says what is missing") {
  auto pg = group();
  check_error([&] { pg->all_reduce(ones({4}, kCUDA)).wait(); }, {"all_reduce", "need NCCL"});
}

#endif
