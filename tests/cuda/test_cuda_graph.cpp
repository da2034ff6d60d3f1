// CUDA graphs: a whole mixed-precision training step (forward, backward, GradScaler, fused SGD)
// captured once and replayed, against the same steps run eagerly: bit for bit, with an overflow
// and a learning-rate schedule; dropout's masks per replay; host waits refused; memory flat; the
// graph's pool freed with it.
#include <optional>

#include "framework/cuda_graph.h"
#include "helpers.h"
#ifdef HG_WITH_CUDA
#include "kernels/cuda/graph.h"
#endif

using namespace hg;
using hg::test::check_close;

namespace {

constexpr int64_t kGraphBatch = 64;

std::shared_ptr<nn::Sequential> graph_mlp() {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(784, 256))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(256, 256))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(256, 10));
  return model;
}

// Batch `i` on the CPU: inputs in [0, 1) and labels from the global generator's seed 1000 + i; with
// `poison` one input is inf, so a float16 step overflows.
std::pair<Tensor, Tensor> graph_batch(int i, bool poison) {
  manual_seed(1000 + static_cast<uint64_t>(i));
  Tensor x = rand({kGraphBatch, 784});
  if (poison) x.data_ptr<float>()[3 * 784 + 100] = INFINITY;
  return {x, randint(0, 10, {kGraphBatch})};
}

// One model, its SGD and scaler, and the step that both the eager run and the capture run.
struct GraphTrainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  Dtype dtype;

  GraphTrainer(Dtype dt, bool use_scaler) : dtype(dt) {
    manual_seed(5);
    model = graph_mlp();
    model->to(Device(kCUDA));
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    scaler = std::make_unique<amp::GradScaler>(Device(kCUDA),
                                               amp::GradScalerOptions{.init_scale = 1024.0, .enabled = use_scaler});
  }

  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(kCUDA, dtype);
      loss = cross_entropy((*model)(x), y);
    }
    scaler->scale(loss).backward();
    scaler->step(*opt);
    scaler->update();
    return loss.detach();
  }

  std::vector<Tensor> params_cpu() const {
    std::vector<Tensor> out;
    for (const Tensor& p : model->parameters()) out.push_back(p.detach().to(kCPU));
    return out;
  }
};

// The learning rate of step i (a schedule the replays must follow).
double graph_lr_at(int i) { return 0.05 * (i % 3 == 2 ? 0.5 : 1.0) / (1.0 + 0.1 * i); }

void check_graph_matches_eager(Dtype dt, bool use_scaler) {
  constexpr int kWarmup = 3, kReplays = 10, kPoisoned = 6;
  GraphTrainer eager(dt, use_scaler), graphed(dt, use_scaler);
  Tensor x_static = empty({kGraphBatch, 784}, TensorOptions(kFloat32).device(kCUDA));
  Tensor y_static = empty({kGraphBatch}, TensorOptions(kInt64).device(kCUDA));
  // Warm-up: both run the same eager steps (the optimizer state, the plans, the device scalars).
  for (int i = 0; i < kWarmup; ++i) {
    const auto [x, y] = graph_batch(i, false);
    eager.opt->set_lr(graph_lr_at(i));
    graphed.opt->set_lr(graph_lr_at(i));
    (void)eager.step(x.to(kCUDA), y.to(kCUDA));
    x_static.copy_(x);
    y_static.copy_(y);
    (void)graphed.step(x_static, y_static);
  }
  cuda::Graph graph;
  Tensor loss_static;
  graph.capture([&] { loss_static = graphed.step(x_static, y_static); });
  REQUIRE(graph.captured());
  CHECK(graph.random_seeds() == 0);
  for (int r = 0; r < kReplays; ++r) {
    CAPTURE(r);
    const int i = kWarmup + r;
    const bool poison = use_scaler && i == kWarmup + kPoisoned;
    const auto [x, y] = graph_batch(i, poison);
    eager.opt->set_lr(graph_lr_at(i));
    graphed.opt->set_lr(graph_lr_at(i));  // writes the device scalar the captured update reads
    const Tensor loss = eager.step(x.to(kCUDA), y.to(kCUDA));
    x_static.copy_(x);
    y_static.copy_(y);
    graph.replay();
    if (poison) {
      // The loss is not finite on either side (inf or NaN), so it is not compared by value.
      CHECK_FALSE(std::isfinite(loss_static.item<float>()));
      CHECK_FALSE(std::isfinite(loss.item<float>()));
    } else {
      check_close(loss_static.to(kCPU), loss.to(kCPU), {0, 0});
    }
    const auto want = eager.params_cpu(), got = graphed.params_cpu();
    for (size_t k = 0; k < want.size(); ++k) check_close(got[k], want[k], {0, 0});
    CHECK(graphed.scaler->get_scale() == eager.scaler->get_scale());
    if (poison) CHECK(graphed.scaler->get_scale() == 512.0);  // skipped, and the scale halved
  }
}

}  // namespace

TEST_CASE("cuda graph: a captured bf16 MLP step matches the eager step bit for bit over 10 replays") {
  check_graph_matches_eager(kBFloat16, false);
}

TEST_CASE("cuda graph: fp16 with the GradScaler captured whole, overflow skipped and scale halved as eager") {
  check_graph_matches_eager(kFloat16, true);
}

TEST_CASE("cuda graph: dropout masks differ between replays and equal eager's for the same seed") {
  const Tensor x = ones({4096}).to(kCUDA);
  (void)dropout(x, 0.5);  // warm-up
  constexpr int kSteps = 4;
  std::vector<Tensor> eager;
  manual_seed(77);
  for (int i = 0; i < kSteps; ++i) {
    const Tensor q = ones({2, 2, 16, 8}).to(kCUDA);
    eager.push_back(dropout(x, 0.5).to(kCPU));
    eager.push_back(scaled_dot_product_attention(q, q, q, Tensor(), 0.3).to(kCPU));
  }
  const Tensor q = ones({2, 2, 16, 8}).to(kCUDA);
  cuda::Graph graph;
  Tensor out, att;
  graph.capture([&] {
    out = dropout(x, 0.5);
    att = scaled_dot_product_attention(q, q, q, Tensor(), 0.3);
  });
  CHECK(graph.random_seeds() == 2);
  manual_seed(77);
  for (int i = 0; i < kSteps; ++i) {
    CAPTURE(i);
    graph.replay();
    check_close(out.to(kCPU), eager[2 * static_cast<size_t>(i)], {0, 0});
    check_close(att.to(kCPU), eager[2 * static_cast<size_t>(i) + 1], {0, 0});
    if (i > 0) CHECK(max(abs(out.to(kCPU) - eager[2 * static_cast<size_t>(i) - 2])).item<float>() > 0.0f);
  }
}

TEST_CASE("cuda graph: a host wait inside a capture throws by name and leaves the device usable") {
  const Tensor a = ones({16}).to(kCUDA);
  (void)(a * 2.0).sum();
  cuda::Graph graph;
  CHECK_THROWS_WITH_AS(graph.capture([&] { (void)(a * 2.0).sum().item<float>(); }),
                       doctest::Contains("[item] cannot read a tensor's value"), Error);
  CHECK_FALSE(graph.captured());
  CHECK_FALSE(cuda::is_capturing());
  CHECK_THROWS_WITH_AS(graph.capture([&] { (void)a.to(kCPU); }), doctest::Contains("[to] cannot"), Error);
  CHECK_THROWS_WITH_AS(graph.capture([&] { cuda::synchronize(); }), doctest::Contains("[cuda::synchronize]"), Error);
  // The device and a later capture still work.
  CHECK((a * 2.0).sum().item<float>() == 32.0f);
  Tensor out;
  graph.capture([&] { out = (a * 3.0).sum(); });
  graph.replay();
  CHECK(out.item<float>() == 48.0f);
}

TEST_CASE("cuda graph: memory stays flat over 1000 replays and the graph's pool goes with it") {
  GraphTrainer t(kBFloat16, false);
  const auto [x, y] = graph_batch(0, false);
  const Tensor xs = x.to(kCUDA), ys = y.to(kCUDA);
  for (int i = 0; i < 3; ++i) (void)t.step(xs, ys);
  cuda::synchronize();
  [[maybe_unused]] const MemoryStats before = cuda::memory_stats(0);
  std::optional<cuda::Graph> graph(std::in_place);
  Tensor loss;
  graph->capture([&] { loss = t.step(xs, ys); });
  graph->replay();
  cuda::synchronize();
  const MemoryStats first = cuda::memory_stats(0);
  for (int i = 0; i < 1000; ++i) graph->replay();
  cuda::synchronize();
  const MemoryStats after = cuda::memory_stats(0);
  CHECK(after.reserved == first.reserved);
  CHECK(after.allocated == first.allocated);
  CHECK(after.system_allocations == first.system_allocations);
  CHECK(std::isfinite(loss.item<float>()));
#ifdef HG_WITH_CUDA
  CHECK(cuda::graph_pool_bytes(0) > 0);
  // The tensors the capture made (the loss, the gradients) go first, then the graph: its pool is
  // returned to the driver, so the reserved bytes fall back to what they were before the capture.
  loss = Tensor();
  t.opt->zero_grad();
  graph.reset();
  CHECK(cuda::graph_pool_bytes(0) == 0);
  CHECK(cuda::memory_stats(0).reserved < after.reserved);
  CHECK(cuda::memory_stats(0).allocated <= before.allocated);
#else
  MESSAGE("graph pool bookkeeping not checked: test_cuda was built without HG_WITH_CUDA");
#endif
}
