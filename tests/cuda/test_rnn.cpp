// The recurrence ops (lstm/gru/rnn_recurrence) and nn::LSTM/GRU/RNN on CUDA against the CPU:
// forward, input and parameter gradients, every float dtype, and bfloat16 autocast. (Written
// without a GPU: unverified until a GPU session runs the cuda suite.)
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_with_grad;
using hg::test::row_tolerance;

TEST_CASE("cuda lstm/gru/rnn_recurrence (+backward) match the CPU in every float dtype") {
  manual_seed(43);
  const int64_t L = 5, N = 3, H = 6;
  for (Dtype d : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    // A sequence's rounding errors add up over the steps: twice the row tolerance.
    auto tol = row_tolerance(d);
    tol.atol *= 2, tol.rtol *= 2;
    for (bool reverse : {false, true}) {
      check_with_grad(
          [&](const auto& v) {
            auto [y, h, c] = lstm_recurrence(v[0], v[1], v[2], v[3], v[4], reverse);
            return cat({y.flatten(), h.flatten(), c.flatten()});
          },
          {randn({L, N, 4 * H}).to(d), randn({N, H}).to(d), randn({N, H}).to(d), (randn({4 * H, H}) * 0.3).to(d),
           randn({4 * H}).to(d)},
          tol);
      check_with_grad(
          [&](const auto& v) {
            auto [y, h] = gru_recurrence(v[0], v[1], v[2], v[3], reverse);
            return cat({y.flatten(), h.flatten()});
          },
          {randn({L, N, 3 * H}).to(d), randn({N, H}).to(d), (randn({3 * H, H}) * 0.3).to(d), randn({3 * H}).to(d)},
          tol);
      for (bool relu : {false, true})
        check_with_grad(
            [&](const auto& v) {
              auto [y, h] = rnn_recurrence(v[0], v[1], v[2], Tensor(), relu, reverse);
              return cat({y.flatten(), h.flatten()});
            },
            {randn({L, N, H}).to(d), randn({N, H}).to(d), (randn({H, H}) * 0.3).to(d)}, tol);
    }
  }
}

TEST_CASE("cuda lstm/gru_recurrence on packed rows (batch_sizes) match the CPU") {
  manual_seed(46);
  const std::vector<int64_t> sizes = {3, 3, 2, 1};
  const int64_t rows = 9, N = 3, H = 6;
  for (Dtype d : {kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(d));
    auto tol = row_tolerance(d);
    tol.atol *= 2, tol.rtol *= 2;
    for (bool reverse : {false, true}) {
      check_with_grad(
          [&](const auto& v) {
            auto [y, h, c] = lstm_recurrence(v[0], v[1], v[2], v[3], v[4], reverse, sizes);
            return cat({y.flatten(), h.flatten(), c.flatten()});
          },
          {randn({rows, 4 * H}).to(d), randn({N, H}).to(d), randn({N, H}).to(d), (randn({4 * H, H}) * 0.3).to(d),
           randn({4 * H}).to(d)},
          tol);
      check_with_grad(
          [&](const auto& v) {
            auto [y, h] = gru_recurrence(v[0], v[1], v[2], v[3], reverse, sizes);
            return cat({y.flatten(), h.flatten()});
          },
          {randn({rows, 3 * H}).to(d), randn({N, H}).to(d), (randn({3 * H, H}) * 0.3).to(d), randn({3 * H}).to(d)},
          tol);
    }
  }
  // The projected LSTM (proj_size), full and packed.
  for (bool packed : {false, true}) {
    const std::vector<int64_t> steps = packed ? sizes : std::vector<int64_t>{};
    check_with_grad(
        [&](const auto& v) {
          auto [y, h, c] = lstm_projected_recurrence(v[0], v[1], v[2], v[3], v[4], v[5], false, steps);
          return cat({y.flatten(), h.flatten(), c.flatten()});
        },
        {packed ? randn({rows, 4 * H}) : randn({4, N, 4 * H}), randn({N, 2}), randn({N, H}), randn({4 * H, 2}) * 0.3,
         randn({4 * H}), randn({2, H}) * 0.3},
        row_tolerance(kFloat32));
  }
  // The module on a packed, unsorted batch.
  nn::LSTM cpu(5, 7, {.num_layers = 2, .bidirectional = true});
  nn::LSTM gpu(5, 7, {.num_layers = 2, .bidirectional = true});
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(kCUDA);
  const Tensor x = randn({6, 4, 5});
  const std::vector<int64_t> lengths = {2, 6, 1, 4};
  auto [y_cpu, s_cpu] = cpu(nn::pack_padded_sequence(x, lengths, false, false));
  auto [y_gpu, s_gpu] = gpu(nn::pack_padded_sequence(x.to(kCUDA), lengths, false, false));
  REQUIRE(y_gpu.data.device().is_cuda());
  check_close(nn::pad_packed_sequence(y_gpu).first.to(kCPU), nn::pad_packed_sequence(y_cpu).first, {1e-5, 1e-4});
  check_close(s_gpu.h.to(kCPU), s_cpu.h, {1e-5, 1e-4});
  check_close(s_gpu.c.to(kCPU), s_cpu.c, {1e-5, 1e-4});
}

TEST_CASE("cuda nn::LSTM (2 layers, bidirectional, batch-first): outputs and parameter gradients match the CPU") {
  manual_seed(44);
  nn::LSTM cpu(5, 7, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  nn::LSTM gpu(5, 7, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(kCUDA);
  const Tensor x = randn({3, 6, 5});
  auto [y_cpu, s_cpu] = cpu(x);
  auto [y_gpu, s_gpu] = gpu(x.to(kCUDA));
  REQUIRE(y_gpu.device().is_cuda());
  check_close(y_gpu.to(kCPU), y_cpu, {1e-5, 1e-4});
  check_close(s_gpu.c.to(kCPU), s_cpu.c, {1e-5, 1e-4});
  (y_cpu.sum() + s_cpu.h.sum()).backward();
  (y_gpu.sum() + s_gpu.h.sum()).backward();
  const auto pg = gpu.named_parameters();
  for (auto& [name, p] : cpu.named_parameters()) {
    CAPTURE(name);
    for (auto& [gname, gp] : pg)
      if (gname == name) check_close(gp.grad().to(kCPU), p.grad(), {1e-4, 1e-3});
  }
  // Under bfloat16 autocast the GEMMs and the cells run in bfloat16; gradients stay float32.
  Tensor yb;
  {
    amp::AutocastGuard autocast(kCUDA, kBFloat16);
    yb = gpu(x.to(kCUDA)).output;
  }
  CHECK(yb.dtype() == kBFloat16);
  check_close(yb.to(kFloat32).to(kCPU), y_cpu.detach(), {3e-2, 3e-2});
  gpu.zero_grad();
  yb.to(kFloat32).sum().backward();
  for (auto& [name, p] : gpu.named_parameters()) CHECK(p.grad().dtype() == kFloat32);
}

TEST_CASE("cuda nn::GRU and nn::RNN match the CPU") {
  manual_seed(45);
  nn::GRU gru(4, 5, {.num_layers = 2});
  nn::RNN rnn(4, 5, {.nonlinearity = "relu", .bidirectional = true});
  const Tensor x = randn({7, 2, 4});
  const Tensor yg = gru(x).output, yr = rnn(x).output;
  gru.to(kCUDA);
  rnn.to(kCUDA);
  check_close(gru(x.to(kCUDA)).output.to(kCPU), yg, {1e-5, 1e-4});
  check_close(rnn(x.to(kCUDA)).output.to(kCPU), yr, {1e-5, 1e-4});
}
