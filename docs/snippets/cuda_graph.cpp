// One CUDA graph per training step: warm up, capture forward, backward, GradScaler and SGD once,
// then replay the whole float16 step with one launch per batch. Without a GPU it says so and stops.
#include <halfgrad.h>

int main() {
  if (!hg::cuda::is_available()) {
    try {
      hg::cuda::Graph graph;
      graph.capture_begin();  // the API refuses with a one-line hg::Error
    } catch (const hg::Error& e) {
      fmt::print("no CUDA graph here: {}\n", e.what());
    }
    return 0;
  }
  const hg::Device cuda(hg::kCUDA, 0);
  hg::manual_seed(0);
  auto model = std::make_shared<hg::nn::Sequential>();
  model->push_back(std::make_shared<hg::nn::Linear>(784, 512))
      .push_back(std::make_shared<hg::nn::ReLU>())
      .push_back(std::make_shared<hg::nn::Dropout>(0.1))  // new masks every replay
      .push_back(std::make_shared<hg::nn::Linear>(512, 10));
  model->to(cuda);
  hg::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  hg::optim::StepLR schedule(opt, /*step_size=*/50, /*gamma=*/0.5);
  hg::amp::GradScaler scaler(cuda);  // float16: loss scaling, all of it on the device

  // Static inputs: the captured step reads these buffers; each batch is copied into them.
  hg::Tensor x_static = hg::zeros({128, 784}, hg::TensorOptions().device(cuda));
  hg::Tensor y_static = hg::zeros({128}, hg::TensorOptions(hg::kInt64).device(cuda));
  hg::Tensor loss_static;  // the captured step's output, rewritten by every replay
  auto step = [&] {
    opt.zero_grad();
    hg::Tensor loss;
    {
      hg::amp::AutocastGuard autocast(hg::kCUDA, hg::kFloat16);
      loss = hg::cross_entropy((*model)(x_static), y_static);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);  // skipped on the device when a gradient overflowed
    scaler.update();   // the scale backs off or grows on the device
    loss_static = loss.detach();
  };
  auto next_batch = [&](int i) {
    hg::manual_seed(100 + static_cast<uint64_t>(i));  // stands in for a DataLoader
    x_static.copy_(hg::rand({128, 784}));
    y_static.copy_(hg::randint(0, 10, {128}));
  };

  for (int i = 0; i < 3; ++i) {  // warm-up: optimizer state, GEMM plans, device scalars
    next_batch(i);
    step();
  }
  hg::cuda::Graph graph;
  graph.capture(step);  // records the step; nothing runs yet
  for (int i = 3; i < 200; ++i) {
    next_batch(i);
    graph.replay();   // the whole step, one launch
    schedule.step();  // writes the learning rate the captured update reads on the device
    if (i % 50 == 0) fmt::print("step {} loss {:.4f} scale {}\n", i, loss_static.item<float>(), scaler.get_scale());
  }
}
