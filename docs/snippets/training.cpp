// Data, optimizers and a learning-rate schedule: a small classifier trained to fit its data.
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
  // Options are aggregates: name what you change, the rest keeps PyTorch's defaults.
  hg::optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.05});
  hg::optim::StepLR schedule(opt, /*step_size=*/5, /*gamma=*/0.5);

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
  HG_CHECK(opt.lr() == 1e-2 * 0.25, "guide", "two StepLR decays");
}
