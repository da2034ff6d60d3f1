// MNIST with a small CNN: conv(1->32, 3x3) -> ReLU -> conv(32->64, 3x3) -> ReLU -> maxpool 2 ->
// flatten -> linear(9216->128) -> ReLU -> linear(128->10).
// Run: build/examples/mnist_cnn --data data/mnist --epochs 1
#include "common.h"
#include "models.h"

int main(int argc, char** argv) {
  examples::Args args;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a small CNN on MNIST", args, code)) return code;
  return examples::run_main([&] {
    // Fail now, not after an epoch of training, when the checkpoint cannot be written there.
    if (!args.save.empty()) hg::check_save_path(args.save);
    hg::manual_seed(args.seed);
    const hg::Device device = examples::pick_device(args);
    auto model = examples::mnist_cnn();
    model->to(device);
    const auto train = hg::data::mnist(args.data, hg::data::Split::Train);
    const auto test = hg::data::mnist(args.data, hg::data::Split::Test);
    // With --workers N, N threads gather and shuffle batches ahead of the training loop (the same
    // batches as without); on a GPU they also stage them in pinned memory for asynchronous copies.
    hg::data::DataLoader loader(train, {.batch_size = args.batch_size,
                                        .shuffle = true,
                                        .seed = args.seed,
                                        .num_workers = static_cast<int>(args.workers),
                                        .pin_memory = device.is_cuda() && args.workers > 0});
    hg::optim::SGD opt(model->parameters(), {.lr = args.lr, .momentum = args.momentum});
    // Mixed precision: autocast picks each op's dtype inside the guard; fp16 also needs loss
    // scaling. For --amp off and bf16 the scaler is disabled and passes everything through.
    const std::optional<hg::Dtype> amp = examples::amp_dtype(args);
    hg::amp::GradScaler scaler(device, {.enabled = args.amp == "fp16"});
    const int64_t start_epoch = examples::resume(args, *model, opt, scaler);

    examples::TrainLog log(args.epochs, loader.size());
    for (int64_t epoch = start_epoch; epoch < args.epochs; ++epoch) {
      loader.set_epoch(epoch);
      log.start_epoch(epoch);
      for (hg::TensorList batch : loader) {
        log.start_step();
        const hg::Tensor x = batch[0].to(device), y = batch[1].to(device);
        opt.zero_grad();
        hg::Tensor loss;
        {
          hg::amp::AutocastGuard autocast(device.type, amp, amp.has_value());
          loss = hg::cross_entropy((*model)(x), y);  // cross_entropy runs in float32 under autocast
        }
        scaler.scale(loss).backward();
        scaler.step(opt);  // skipped when fp16 gradients overflowed
        scaler.update();
        log.end_step(loss.item<double>(), x.size(0));
      }
      if (!args.save.empty()) examples::save_checkpoint(args.save, *model, opt, scaler, epoch + 1);
    }
    log.summary("cnn", device, args, examples::accuracy(*model, test, device, args));
    return 0;
  });
}
