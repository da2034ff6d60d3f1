// nn::LSTM, nn::GRU, nn::RNN as modules: PyTorch's parameter names, order and initialisation,
// dropout between layers in training only, the call operator with hooks, autocast, and bad input
// (module and op errors).
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

TEST_CASE("LSTM/GRU/RNN: PyTorch's parameter names, order, shapes and initialisation bounds") {
  manual_seed(4);
  nn::LSTM lstm(5, 8, {.num_layers = 2, .bidirectional = true});
  std::vector<std::string> names;
  for (auto& [name, t] : lstm.named_parameters()) names.push_back(name);
  const std::vector<std::string> expected = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  CHECK(names == expected);
  const auto sd = lstm.state_dict();
  CHECK(sd.at("weight_ih_l0").shape() == Shape{32, 5});
  CHECK(sd.at("weight_ih_l1").shape() == Shape{32, 16});
  CHECK(sd.at("weight_hh_l1_reverse").shape() == Shape{32, 8});
  CHECK(sd.at("bias_hh_l0").shape() == Shape{32});
  for (auto& [name, t] : lstm.named_parameters()) {
    CHECK(t.abs().max().item<float>() <= 1.0f / std::sqrt(8.0f));
    CHECK(t.abs().max().item<float>() > 0.25f);  // spread over the range, not zeros
  }
  nn::GRU gru(3, 4, {.bias = false});
  CHECK(gru.named_parameters().size() == 2);
  CHECK(gru.state_dict().at("weight_hh_l0").shape() == Shape{12, 4});
  nn::RNN rnn(3, 4, {.nonlinearity = "relu"});
  CHECK(rnn.state_dict().at("weight_ih_l0").shape() == Shape{4, 3});
  CHECK(fmt::format("{}", lstm).find("LSTM(5, 8, num_layers=2, bidirectional=true)") != std::string::npos);
  CHECK(fmt::format("{}", rnn).find("RNN(3, 4, nonlinearity=relu)") != std::string::npos);
}

TEST_CASE("LSTM dropout: between layers, in training only") {
  manual_seed(5);
  nn::LSTM lstm(3, 4, {.num_layers = 2, .dropout = 0.5});
  nn::LSTM plain(3, 4, {.num_layers = 2});
  plain.load_state_dict(lstm.state_dict());
  const Tensor x = randn({6, 2, 3});
  lstm.eval();
  check_close(lstm(x).output, plain(x).output, {0, 0});
  lstm.train();
  CHECK_FALSE(test::bitwise_equal(lstm(x).output, plain(x).output));
  // p = 1 in training: the second layer sees zeros.
  nn::LSTM all(3, 4, {.num_layers = 2, .dropout = 1.0});
  all.load_state_dict(lstm.state_dict());
  nn::LSTM second(4, 4);
  for (auto& [name, t] : second.named_parameters()) {
    NoGradGuard g;
    t.copy_(all.state_dict().at(name.substr(0, name.size() - 1) + "1"));
  }
  check_close(all(x).output, second(zeros({6, 2, 4})).output, {1e-7, 1e-7});
  // A 1-layer module applies no dropout at all.
  nn::GRU one(3, 4, {.dropout = 0.9});
  check_close(one(x).output, one(x).output, {0, 0});
}

TEST_CASE("LSTM/GRU/RNN called as modules: the hooks see the output, the state passes through") {
  manual_seed(6);
  nn::LSTM lstm(3, 4);
  const Tensor x = randn({5, 2, 3});
  auto [y, state] = lstm(x);
  auto [y2, state2] = lstm(x, state);  // a state feeds back in
  CHECK(state2.h.shape() == Shape{1, 2, 4});
  int calls = 0;
  RemovableHandle pre = lstm.register_forward_pre_hook([&](nn::Module&, const Tensor& in) -> std::optional<Tensor> {
    ++calls;
    return in * 2.0;
  });
  RemovableHandle post = lstm.register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> { return out + 1.0; });
  auto hooked = lstm(x, state);
  const auto direct = lstm.forward(x * 2.0, state);
  CHECK(calls == 1);
  check_close(hooked.output, direct.output + 1.0, {1e-6, 1e-6});
  check_close(hooked.state.c, direct.state.c, {0, 0});
  nn::GRU gru(3, 4);
  RemovableHandle gpost = gru.register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> { return out * 0.0; });
  CHECK(gru(x).output.abs().sum().item<float>() == 0.0f);
}

TEST_CASE("LSTM under bfloat16 autocast: the GEMMs in bfloat16, float32 gradients, close to float32") {
  manual_seed(7);
  nn::LSTM lstm(8, 16, {.num_layers = 2, .batch_first = true});
  const Tensor x = randn({4, 10, 8});
  const Tensor ref = lstm(x).output;
  nn::LSTMOutput out;
  {
    amp::AutocastGuard autocast(kCPU, kBFloat16);
    out = lstm(x);
  }
  CHECK(out.output.dtype() == kBFloat16);
  CHECK(out.state.c.dtype() == kBFloat16);
  check_close(out.output.to(kFloat32), ref, {3e-2, 3e-2});
  out.output.to(kFloat32).sum().backward();
  for (auto& [name, t] : lstm.named_parameters()) {
    const std::string& param_name = name;  // clang 14 cannot capture a structured binding
    CAPTURE(param_name);
    REQUIRE(t.grad().defined());
    CHECK(t.grad().dtype() == kFloat32);
  }
}

TEST_CASE("LSTM/GRU/RNN: bad input names the module or op") {
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  check_error([&] { lstm(randn({2, 3, 5})); }, {"[LSTM]", "input.size(-1) must be equal to input_size", "Expected 3"});
  check_error([&] { lstm(randn({2, 2, 2, 3})); }, {"[LSTM]", "2-D or 3-D", "4-D"});
  check_error([&] { lstm(randn({0, 2, 3})); }, {"[LSTM]", "sequence length"});
  check_error([&] { lstm(randn({5, 2, 3}), {randn({2, 3, 4}), randn({2, 3, 4})}); }, {"[LSTM]", "hx", "[2, 2, 4]"});
  check_error([&] { lstm(randn({5, 2, 3}), {randn({2, 2, 4}), randn({2, 2, 5})}); }, {"[LSTM]", "cx"});
  check_error([&] { lstm(randn({5, 2, 3}), {randn({2, 2, 4}), Tensor()}); }, {"[LSTM]", "both h and c"});
  check_error(
      [&] {
        lstm(randn({5, 3}), {randn({2, 1, 4}), randn({2, 1, 4})});
      },
      {"[LSTM]", "unbatched 2-D input", "hx should also be 2-D"});
  check_error([&] { lstm(Tensor()); }, {"[LSTM]", "undefined"});
  check_error([] { nn::LSTM(3, 4, {.dropout = 1.5}); }, {"[LSTM]", "dropout should be a number in range [0, 1]"});
  check_error([] { nn::GRU(3, 4, {.dropout = -0.1}); }, {"[GRU]", "dropout"});
  check_error([] { nn::GRU(3, 0); }, {"[GRU]", "hidden_size must be greater than zero"});
  check_error([] { nn::RNN(0, 4); }, {"[RNN]", "input_size must be greater than zero"});
  check_error([] { nn::RNN(3, 4, {.num_layers = 0}); }, {"[RNN]", "num_layers"});
  check_error([] { nn::RNN(3, 4, {.nonlinearity = "sigmoid"}); }, {"[RNN]", "Unknown nonlinearity 'sigmoid'"});
  nn::GRU gru(3, 4);
  check_error([&] { gru(randn({5, 2, 3}), randn({1, 2, 4}, kFloat64)); }, {"[gru_recurrence]", "dtype"});
  check_error([&] { gru(randn({5, 2, 3}), randn({1, 2})); }, {"[GRU]", "hx should also be 3-D"});
  // The ops themselves.
  const Tensor gx = randn({3, 2, 8}), h = randn({2, 2}), c = randn({2, 2}), w = randn({8, 2});
  check_error([&] { lstm_recurrence(gx.select(0, 0), h, c, w, Tensor()); }, {"[lstm_recurrence]", "3-d"});
  check_error([&] { lstm_recurrence(gx, h, c, randn({8, 3}), Tensor()); }, {"[lstm_recurrence]", "w_hh", "[8, 2]"});
  check_error([&] { lstm_recurrence(gx, h, randn({3, 2}), w, Tensor()); }, {"[lstm_recurrence]", "c0"});
  check_error([&] { lstm_recurrence(gx, h, c, w, randn({7})); }, {"[lstm_recurrence]", "b_hh"});
  check_error([&] { lstm_recurrence(randn({0, 2, 8}), h, c, w, Tensor()); }, {"[lstm_recurrence]", "sequence length"});
  check_error([&] { gru_recurrence(gx, h, w, Tensor()); }, {"[gru_recurrence]", "columns"});
  check_error([&] { rnn_recurrence(randn({3, 2}).to(kInt64), h, w, Tensor()); }, {"[rnn_recurrence]", "floating"});
  check_error(
      [&] {
        rnn_recurrence(randn({3, 2, 2}), Tensor(), randn({2, 2}), Tensor());
      },
      {"[rnn_recurrence]", "h0", "undefined"});
}

TEST_CASE("LSTM: an empty batch gives empty outputs") {
  nn::LSTM lstm(3, 4, {.bidirectional = true});
  auto [y, s] = lstm(zeros({5, 0, 3}));
  CHECK(y.shape() == Shape{5, 0, 8});
  CHECK(s.h.shape() == Shape{2, 0, 4});
}
