// Embedding and Dropout modules: init, forward, gradients, train/eval, state_dict.
#include <cmath>

#include "nn_helpers.h"

using namespace hg;
using hg::test::check_error;
using hg::test::values;

TEST_CASE("Embedding: N(0,1) init, row lookup, gradients scatter into rows, state_dict") {
  manual_seed(11);
  nn::Embedding emb(50, 8);
  CHECK(emb.weight.shape() == Shape{50, 8});
  double mean = 0, sq = 0;
  for (double w : values(emb.weight)) mean += w / 400, sq += w * w / 400;
  CHECK(std::abs(mean) < 0.15);
  CHECK(std::abs(std::sqrt(sq - mean * mean) - 1.0) < 0.15);
  const Tensor idx = tensor(std::vector<int64_t>{3, 0, 3, 49}, {2, 2});
  const Tensor out = emb(idx);
  CHECK(out.shape() == Shape{2, 2, 8});
  CHECK(out.select(0, 0).select(0, 0).to_vector<float>() == emb.weight.select(0, 3).to_vector<float>());
  out.sum().backward();
  CHECK(emb.weight.grad().select(0, 3).to_vector<float>() == std::vector<float>(8, 2.0f));
  CHECK(emb.weight.grad().select(0, 1).to_vector<float>() == std::vector<float>(8, 0.0f));
  hg::test::check_module_gradients(emb, tensor(std::vector<int64_t>{1, 4, 1}));
  check_error([&] { emb(tensor(std::vector<int64_t>{50})); }, {"[embedding]", "50"});
  check_error([] { nn::Embedding(0, 3); }, {"[Embedding]"});
  nn::Embedding other(50, 8);
  other.load_state_dict(emb.state_dict());
  CHECK(values(other.weight) == values(emb.weight));
}

TEST_CASE("Dropout: scales kept elements in training, identity in eval, reproducible with a seed") {
  nn::Dropout drop(0.25);
  const Tensor x = ones({1000});
  manual_seed(5);
  const auto a = values(drop(x));
  int zeros = 0;
  for (double v : a) {
    CHECK((v == 0.0 || std::abs(v - 1.0 / 0.75) < 1e-6));
    zeros += v == 0.0;
  }
  CHECK(zeros > 180);
  CHECK(zeros < 320);
  manual_seed(5);
  CHECK(values(drop(x)) == a);
  drop.eval();
  CHECK(values(drop(x)) == values(x));
  drop.train();
  hg::test::check_module_gradients(drop, randn({4, 5}), [] { manual_seed(9); });
  check_error([] { nn::Dropout(1.5); }, {"[Dropout]", "[0, 1]", "1.5"});
  // p = 1 drops everything, as PyTorch allows: zeros out, zero gradient.
  nn::Dropout all(1.0);
  const Tensor xg = randn({3, 4}).requires_grad_();
  CHECK(all(xg).abs().sum().item<double>() == 0.0);
  all(xg).sum().backward();
  CHECK(xg.grad().abs().sum().item<double>() == 0.0);
  CHECK(drop.state_dict().empty());
}
