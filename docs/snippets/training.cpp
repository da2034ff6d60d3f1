// Data, optimizers and a learning-rate schedule: a small classifier trained to fit its data.
#include <cmath>

#include <halfgrad.h>

int main() {
  hg::manual_seed(0);
  // Two Gaussian blobs: label 1 where the first feature is positive.
  hg::Tensor x = hg::randn({512, 2});
  hg::Tensor y = hg::gt(x.select(1, 0), hg::zeros({512})).to(hg::kInt64);
  hg::data::TensorDataset dataset{x, y};
  hg::data::DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .seed = 0});

  auto model = std::make_shared<hg::nn::Sequential>();
  model->push_back(std::make_shared<hg::nn::Linear>(2, 16))
      .push_back(std::make_shared<hg::nn::ReLU>())
      .push_back(std::make_shared<hg::nn::Linear>(16, 2));
  // Parameter groups, each with its own options: weight decay on the weight matrices only. Options
  // are aggregates: name what you change, the rest keeps PyTorch's defaults.
  hg::TensorList matrices, others;
  for (const auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? matrices : others).push_back(p);
  hg::optim::AdamW opt({{matrices, {.lr = 1e-2, .weight_decay = 0.05}}, {others, {.lr = 1e-2, .weight_decay = 0.0}}});
  // Two epochs of linear warm-up from a tenth of each group's lr, then a cosine decay.
  hg::optim::LinearLR warmup(opt, /*start_factor=*/0.1, /*end_factor=*/1.0, /*total_iters=*/2);
  hg::optim::CosineAnnealingLR cosine(opt, /*t_max=*/8, /*eta_min=*/1e-4);
  hg::optim::SequentialLR schedule(opt, {&warmup, &cosine}, /*milestones=*/{2});

  double first = 0, last = 0;
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    loader.set_epoch(epoch);  // a new shuffle per epoch, fixed by (seed, epoch)
    double total = 0;
    for (hg::TensorList batch : loader) {
      opt.zero_grad();
      hg::Tensor loss = hg::cross_entropy((*model)(batch[0]), batch[1]);
      loss.backward();
      hg::optim::clip_grad_norm_(opt.params(), 1.0);
      opt.step();
      total += loss.item<double>();
    }
    schedule.step();
    (epoch == 0 ? first : last) = total / static_cast<double>(loader.size());
  }
  fmt::print("loss {:.3f} -> {:.3f}, lr {}\n", first, last, opt.lr());
  HG_CHECK(last < first / 2, "guide", "training lowers the loss");
  HG_CHECK(opt.lr(0) == opt.lr(1) && std::abs(opt.lr() - 1e-4) < 1e-12, "guide", "the cosine ends at eta_min");
}
