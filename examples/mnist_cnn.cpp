// MNIST with a small CNN: conv(1->32, 3x3) -> ReLU -> conv(32->64, 3x3) -> ReLU -> maxpool 2 ->
// flatten -> linear(9216->128) -> ReLU -> linear(128->10).
// Run: build/examples/mnist_cnn --data datasets/mnist --epochs 1
// Data-parallel: mpirun -np 2 build/examples/mnist_cnn --distributed ... (docs/DISTRIBUTED.md)
#include "common.h"
#include "data_parallel.h"
#include "graph_step.h"
#include "models.h"

int main(int argc, char** argv) {
  examples::Args args;
  args.distributed_supported = true;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a small CNN on MNIST", args, code)) return code;
  return examples::run_main([&] {
    // Fail now, not after an epoch of training, when the checkpoint cannot be written there.
    if (!args.save.empty()) hg::check_save_path(args.save);
    hg::manual_seed(args.seed);
    const hg::Device device = examples::pick_device(args);
    auto model = examples::mnist_cnn();
    // conv -> ReLU -> conv -> ReLU -> 2x2 max-pool run as two fused ops (conv2d_relu,
    // conv2d_relu_max_pool2d): the same values and gradients, fewer passes over the activations.
    hg::nn::fuse(*model);
    model->to(device);
    const auto train = hg::data::mnist(args.data, hg::data::Split::Train);
    const auto test = hg::data::mnist(args.data, hg::data::Split::Test);
    // --distributed: every rank trains a replica on its shard with batch_size / world samples a
    // step; DDP averages the gradients, so a step sees the global batch as one process would.
    examples::DataParallel parallel(args.distributed, "mnist_cnn", args.batch_size, device, args.reduce_dtype);
    const std::shared_ptr<hg::nn::Module> net = parallel.wrap(model);
    // With --workers N, N threads gather and shuffle batches ahead of the training loop (the same
    // batches as without); on a GPU they also stage them in pinned memory for asynchronous copies.
    auto loader_for = [&](int64_t epoch) {
      return parallel.loader(train, epoch,
                             {.batch_size = args.batch_size,
                              .shuffle = true,
                              .seed = args.seed,
                              .num_workers = static_cast<int>(args.workers),
                              .pin_memory = device.is_cuda() && args.workers > 0});
    };
    hg::optim::SGD opt(model->parameters(), {.lr = args.lr, .momentum = args.momentum});
    // Mixed precision: autocast picks each op's dtype inside the guard; fp16 also needs loss
    // scaling. For --amp off and bf16 the scaler is disabled and passes everything through.
    const std::optional<hg::Dtype> amp = examples::amp_dtype(args);
    hg::amp::GradScaler scaler(device, {.enabled = args.amp == "fp16"});
    const int64_t start_epoch = examples::resume(args, *model, opt, scaler);

    // One training step; with --cuda-graph captured once after warm-up and replayed per batch.
    examples::GraphedStep train_step(
        [&](const hg::Tensor& x, const hg::Tensor& y) {
          opt.zero_grad();
          hg::Tensor loss;
          {
            hg::amp::AutocastGuard autocast(device.type, amp, amp.has_value());
            loss = hg::cross_entropy((*net)(x), y);  // cross_entropy runs in float32 under autocast
          }
          scaler.scale(loss).backward();
          parallel.wait_for_gradients();  // averaged by the end of backward; this only checks
          scaler.step(opt);               // skipped when fp16 gradients overflowed
          scaler.update();
          return loss.detach();
        },
        args.cuda_graph);

    examples::TrainLog log(args.epochs, loader_for(start_epoch).size());
    for (int64_t epoch = start_epoch; epoch < args.epochs; ++epoch) {
      hg::data::DataLoader loader = loader_for(epoch);
      loader.set_epoch(epoch);
      log.start_epoch(epoch);
      for (hg::TensorList batch : loader) {
        log.start_step();
        const hg::Tensor x = batch[0].to(device), y = batch[1].to(device);
        const hg::Tensor loss = train_step(x, y);
        log.end_step(loss.item<double>(), x.size(0) * parallel.world());  // samples/s: the global rate
      }
      if (!args.save.empty() && parallel.is_main())
        examples::save_checkpoint(args.save, *model, opt, scaler, epoch + 1);
    }
    const double acc = examples::accuracy(*model, test, device, args);  // the same replica on every rank
    if (parallel.is_main()) log.summary(parallel.enabled() ? "cnn_distributed" : "cnn", device, args, acc);
    return 0;
  });
}
