// MNIST with a 784-512-512-10 MLP. Run: build/examples/mnist_mlp --data data/mnist --epochs 1
// Data-parallel: mpirun -np 2 build/examples/mnist_mlp --distributed ... (docs/DISTRIBUTED.md)
#include "common.h"
#include "framework/data/distributed_sampler.h"
#include "framework/nn/distributed.h"
#include "models.h"

int main(int argc, char** argv) {
  examples::Args args;
  args.distributed_supported = true;
  int code = 0;
  if (!examples::parse_args(argc, argv, "Train a 784-512-512-10 MLP on MNIST", args, code)) return code;
  return examples::run_main([&] {
    // Fail now, not after an epoch of training, when the checkpoint cannot be written there.
    if (!args.save.empty()) hg::check_save_path(args.save);
    hg::manual_seed(args.seed);
    const hg::Device device = examples::pick_device(args);
    auto model = examples::mnist_mlp();
    model->to(device);
    const auto train = hg::data::mnist(args.data, hg::data::Split::Train);
    const auto test = hg::data::mnist(args.data, hg::data::Split::Test);
    // --distributed: every rank trains a replica on its shard with batch_size / world samples a
    // step; DDP averages the gradients, so a step sees the global batch as one process would.
    std::shared_ptr<hg::distributed::ProcessGroup> pg;
    if (args.distributed) pg = hg::distributed::ProcessGroup::init();
    const int rank = pg ? pg->rank() : 0, world = pg ? pg->world_size() : 1;
    HG_CHECK(args.batch_size % world == 0, "mnist_mlp", "--batch-size {} does not split evenly over {} ranks",
             args.batch_size, world);
    HG_CHECK(!pg || device.is_cpu(), "mnist_mlp", "--distributed runs on the CPU (MPI); add --device cpu");
    std::shared_ptr<hg::nn::Module> net = model;
    std::shared_ptr<hg::nn::DistributedDataParallel> ddp;
    if (pg) net = ddp = std::make_shared<hg::nn::DistributedDataParallel>(model, pg);
    hg::data::DistributedSampler sampler(train.size(), world, rank, {.shuffle = true, .seed = args.seed});
    // With --workers N, N threads gather and shuffle batches ahead of the training loop (the same
    // batches as without); on a GPU they also stage them in pinned memory for asynchronous copies.
    const int workers = static_cast<int>(args.workers);
    const bool pin = device.is_cuda() && args.workers > 0;
    auto loader_for = [&](int64_t epoch) {
      if (!pg) {
        return hg::data::DataLoader(train, {.batch_size = args.batch_size,
                                            .shuffle = true,
                                            .seed = args.seed,
                                            .num_workers = workers,
                                            .pin_memory = pin});
      }
      const auto idx = sampler.indices(epoch);
      const hg::Tensor index = hg::tensor<int64_t>(idx);
      hg::TensorList shard;
      for (const hg::Tensor& t : train.tensors()) shard.push_back(hg::index_select(t, 0, index));
      return hg::data::DataLoader(hg::data::TensorDataset(shard),
                                  {.batch_size = args.batch_size / world, .num_workers = workers, .pin_memory = pin});
    };
    hg::optim::SGD opt(model->parameters(), {.lr = args.lr, .momentum = args.momentum});
    // Mixed precision: autocast picks each op's dtype inside the guard; fp16 also needs loss
    // scaling. For --amp off and bf16 the scaler is disabled and passes everything through.
    const std::optional<hg::Dtype> amp = examples::amp_dtype(args);
    hg::amp::GradScaler scaler(device, {.enabled = args.amp == "fp16"});
    const int64_t start_epoch = examples::resume(args, *model, opt, scaler);

    examples::TrainLog log(args.epochs, loader_for(start_epoch).size());
    for (int64_t epoch = start_epoch; epoch < args.epochs; ++epoch) {
      hg::data::DataLoader loader = loader_for(epoch);
      loader.set_epoch(epoch);
      log.start_epoch(epoch);
      for (hg::TensorList batch : loader) {
        log.start_step();
        const hg::Tensor x = batch[0].to(device), y = batch[1].to(device);
        opt.zero_grad();
        hg::Tensor loss;
        {
          hg::amp::AutocastGuard autocast(device.type, amp, amp.has_value());
          loss = hg::cross_entropy((*net)(x), y);  // cross_entropy runs in float32 under autocast
        }
        scaler.scale(loss).backward();
        if (ddp) ddp->wait_for_gradients();  // averaged by the end of backward; this only checks
        scaler.step(opt);                    // skipped when fp16 gradients overflowed
        scaler.update();
        log.end_step(loss.item<double>(), x.size(0));
      }
      if (!args.save.empty() && rank == 0) examples::save_checkpoint(args.save, *model, opt, scaler, epoch + 1);
    }
    const double acc = examples::accuracy(*model, test, device, args);  // the same replica on every rank
    if (rank == 0) log.summary(pg ? "mlp_distributed" : "mlp", device, args, acc);
    return 0;
  });
}
