// PackedSequence (pack_padded_sequence, pad_packed_sequence, pad_sequence, pack_sequence) and the
// recurrent modules on packed batches: each sequence runs for its own length, as if alone (checked
// against running it alone), gradients through packing and the packed recurrence (gradcheck), and
// bad input. tests/tools/rnn_twin compares the packed modules with PyTorch's number for number.
#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

TEST_CASE("pack_padded_sequence / pad_packed_sequence: layout, round trip, unsorted batches, total_length") {
  // [T = 3, B = 2, 1]: sequence 0 = 1, 2, 3; sequence 1 = 10 (then padding).
  const Tensor x = tensor(std::vector<float>{1, 10, 2, -1, 3, -1}, {3, 2, 1});
  const nn::PackedSequence p = nn::pack_padded_sequence(x, std::vector<int64_t>{3, 1});
  CHECK(p.data.flatten().to_vector<float>() == std::vector<float>{1, 10, 2, 3});
  CHECK(p.batch_sizes.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1});
  CHECK_FALSE(p.sorted_indices.defined());
  auto [padded, lengths] = nn::pad_packed_sequence(p, false, -5.0, 4);
  CHECK(padded.shape() == Shape{4, 2, 1});
  CHECK(padded.flatten().to_vector<float>() == std::vector<float>{1, 10, 2, -5, 3, -5, -5, -5});
  CHECK(lengths.to_vector<int64_t>() == std::vector<int64_t>{3, 1});

  // Unsorted and batch-first: [B = 3, T = 3]; lengths 1, 3, 2 sort to 3, 2, 1.
  const Tensor xb = tensor(std::vector<float>{7, 0, 0, 1, 2, 3, 4, 5, 0}, {3, 3});
  const nn::PackedSequence q = nn::pack_padded_sequence(xb, std::vector<int64_t>{1, 3, 2}, true, false);
  CHECK(q.sorted_indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 0});
  CHECK(q.unsorted_indices.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1});
  CHECK(q.data.to_vector<float>() == std::vector<float>{1, 4, 7, 2, 5, 3});
  CHECK(q.batch_sizes.to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1});
  auto [back, back_lengths] = nn::pad_packed_sequence(q, true);
  check_close(back, xb, {0, 0});
  CHECK(back_lengths.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 2});
  // Lengths as a tensor, as PyTorch takes them.
  const nn::PackedSequence q2 = nn::pack_padded_sequence(xb, tensor(std::vector<int64_t>{1, 3, 2}), true, false);
  check_close(q2.data, q.data, {0, 0});

  // Gradients flow through both gathers: the padding gets none.
  Tensor xg = randn({4, 3, 2}).requires_grad_();
  auto [y, unused] = nn::pad_packed_sequence(nn::pack_padded_sequence(xg, std::vector<int64_t>{2, 4, 1}, false, false));
  (y * 3.0).sum().backward();
  const auto g = xg.grad().to_vector<float>();
  const std::vector<int64_t> len = {2, 4, 1};
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t b = 0; b < 3; ++b)
      CHECK(g[static_cast<size_t>((t * 3 + b) * 2)] == (t < len[static_cast<size_t>(b)] ? 3.0f : 0.0f));
}

TEST_CASE("pad_sequence and pack_sequence") {
  const TensorList seqs = {tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}), tensor(std::vector<float>{5, 6}, {1, 2}),
                           tensor(std::vector<float>{7, 8, 9, 10, 11, 12}, {3, 2})};
  const Tensor tm = nn::pad_sequence(seqs);
  CHECK(tm.shape() == Shape{3, 3, 2});
  CHECK(tm.flatten().to_vector<float>() == std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 0, 0, 9, 10, 0, 0, 0, 0, 11, 12});
  const Tensor bf = nn::pad_sequence(seqs, true, -1.0);
  CHECK(bf.shape() == Shape{3, 3, 2});
  CHECK(bf.select(1, 2).flatten().to_vector<float>() == std::vector<float>{-1, -1, -1, -1, 11, 12});
  const nn::PackedSequence p = nn::pack_sequence(seqs, false);
  CHECK(p.batch_sizes.to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1});
  CHECK(p.data.flatten().to_vector<float>() == std::vector<float>{7, 8, 1, 2, 5, 6, 9, 10, 3, 4, 11, 12});
  check_error([&] { nn::pack_sequence(seqs); }, {"[pack_padded_sequence]", "decreasing", "enforce_sorted"});
}

namespace {
// Each sequence alone through `run` (an unbatched call) against its rows of the packed call.
template <class RunPacked, class RunOne>
void check_packed_against_alone(const Tensor& x, const std::vector<int64_t>& lengths, bool with_c,
                                const RunPacked& run_packed, const RunOne& run_one) {
  const nn::PackedSequence in = nn::pack_padded_sequence(x, lengths, true, false);
  const auto result = run_packed(in);
  const nn::PackedSequence out = std::get<0>(result);
  const Tensor h = std::get<1>(result), c = std::get<2>(result);
  const Tensor padded = nn::pad_packed_sequence(out, true).first;
  for (size_t b = 0; b < lengths.size(); ++b) {
    CAPTURE(b);
    const int64_t len = lengths[b];
    const Tensor alone_x = x.select(0, static_cast<int64_t>(b)).narrow(0, 0, len);
    const auto alone = run_one(alone_x, static_cast<int64_t>(b));
    const Tensor y1 = std::get<0>(alone), h1 = std::get<1>(alone), c1 = std::get<2>(alone);
    check_close(padded.select(0, static_cast<int64_t>(b)).narrow(0, 0, len), y1, {1e-12, 1e-12});
    check_close(h.select(1, static_cast<int64_t>(b)), h1, {1e-12, 1e-12});
    if (with_c) check_close(c.select(1, static_cast<int64_t>(b)), c1, {1e-12, 1e-12});
    if (len < padded.size(1))
      CHECK(padded.select(0, static_cast<int64_t>(b)).narrow(0, len, padded.size(1) - len).abs().max().item<double>() ==
            0.0);
  }
}
}  // namespace

TEST_CASE("LSTM/GRU/RNN on a packed batch: each sequence as if it ran alone (2 layers, bidirectional)") {
  manual_seed(11);
  const std::vector<int64_t> lengths = {3, 6, 1, 6, 4};
  const Tensor x = randn({5, 6, 3}, kFloat64);
  const Tensor h0 = randn({4, 5, 4}, kFloat64), c0 = randn({4, 5, 4}, kFloat64);
  auto state_of = [](const Tensor& s, int64_t b) { return s.select(1, b); };
  SUBCASE("LSTM") {
    nn::LSTM lstm(3, 4, {.num_layers = 2, .bidirectional = true});
    lstm.to(kFloat64);
    check_packed_against_alone(
        x, lengths, true,
        [&](const nn::PackedSequence& in) {
          auto [y, s] = lstm(in, {h0, c0});
          return std::tuple{y, s.h, s.c};
        },
        [&](const Tensor& xi, int64_t b) {
          auto [y, s] = lstm(xi, {state_of(h0, b), state_of(c0, b)});
          return std::tuple{y, s.h, s.c};
        });
  }
  SUBCASE("GRU") {
    nn::GRU gru(3, 4, {.num_layers = 2, .bidirectional = true});
    gru.to(kFloat64);
    check_packed_against_alone(
        x, lengths, false,
        [&](const nn::PackedSequence& in) {
          auto [y, h] = gru(in, h0);
          return std::tuple{y, h, Tensor()};
        },
        [&](const Tensor& xi, int64_t b) {
          auto [y, h] = gru(xi, state_of(h0, b));
          return std::tuple{y, h, Tensor()};
        });
  }
  SUBCASE("RNN relu, no initial state") {
    nn::RNN rnn(3, 4, {.num_layers = 2, .nonlinearity = "relu", .bidirectional = true});
    rnn.to(kFloat64);
    check_packed_against_alone(
        x, lengths, false,
        [&](const nn::PackedSequence& in) {
          auto [y, h] = rnn(in);
          return std::tuple{y, h, Tensor()};
        },
        [&](const Tensor& xi, int64_t) {
          auto [y, h] = rnn(xi);
          return std::tuple{y, h, Tensor()};
        });
  }
}

TEST_CASE("lstm/gru/rnn_recurrence with batch_sizes: gradcheck in both directions") {
  using autograd::gradcheck;
  manual_seed(12);
  const std::vector<int64_t> sizes = {3, 3, 2, 1};  // 9 packed rows, 3 sequences of lengths 4, 3, 1
  const int64_t rows = 9, N = 3, H = 2;
  for (bool reverse : {false, true}) {
    CAPTURE(reverse);
    CHECK(gradcheck(
        [&](const TensorList& v) {
          auto [y, h, c] = lstm_recurrence(v[0], v[1], v[2], v[3], v[4], reverse, sizes);
          return cat({y.flatten(), h.flatten() * 2.0, c.flatten() * 3.0});
        },
        {randn({rows, 4 * H}, kFloat64), randn({N, H}, kFloat64), randn({N, H}, kFloat64), randn({4 * H, H}, kFloat64),
         randn({4 * H}, kFloat64)}));
    CHECK(gradcheck(
        [&](const TensorList& v) {
          auto [y, h] = gru_recurrence(v[0], v[1], v[2], v[3], reverse, sizes);
          return cat({y.flatten(), h.flatten() * 2.0});
        },
        {randn({rows, 3 * H}, kFloat64), randn({N, H}, kFloat64), randn({3 * H, H}, kFloat64),
         randn({3 * H}, kFloat64)}));
    CHECK(gradcheck(
        [&](const TensorList& v) {
          auto [y, h] = rnn_recurrence(v[0], v[1], v[2], Tensor(), false, reverse, sizes);
          return cat({y.flatten(), h.flatten() * 2.0});
        },
        {randn({rows, H}, kFloat64), randn({N, H}, kFloat64), randn({H, H}, kFloat64) * 0.5}));
    // Only h_n used: the outputs' gradient arrives undefined.
    CHECK(gradcheck(
        [&](const TensorList& v) { return std::get<1>(gru_recurrence(v[0], v[1], v[2], v[3], reverse, sizes)); },
        {randn({rows, 3 * H}, kFloat64), randn({N, H}, kFloat64), randn({3 * H, H}, kFloat64),
         randn({3 * H}, kFloat64)}));
  }
}

TEST_CASE("packed LSTM: forward hooks see the packed data; dropout between layers applies to it") {
  manual_seed(13);
  nn::LSTM lstm(2, 3, {.num_layers = 2, .dropout = 0.5});
  const nn::PackedSequence in = nn::pack_padded_sequence(randn({3, 2, 2}), std::vector<int64_t>{3, 2});
  Shape seen;
  auto handle = lstm.register_forward_hook([&](nn::Module&, const Tensor& input, const Tensor& out) {
    seen = input.shape();
    return std::optional<Tensor>(out * 0.0);
  });
  auto [y, state] = lstm(in);
  CHECK(seen == Shape{5, 2});
  CHECK(y.data.abs().max().item<float>() == 0.0f);
  handle.remove();
  lstm.eval();
  const Tensor a = lstm(in).output.data, b = lstm(in).output.data;
  check_close(a, b, {0, 0});
  lstm.train();
  CHECK_FALSE(test::bitwise_equal(lstm(in).output.data, a));
}

TEST_CASE("packed sequences: bad input gives one-line errors") {
  const Tensor x = randn({4, 2, 3});
  check_error(
      [&] {
        nn::pack_padded_sequence(x, std::vector<int64_t>{2, 3});
      },
      {"[pack_padded_sequence]", "decreasing", "enforce_sorted"});
  check_error([&] { nn::pack_padded_sequence(x, std::vector<int64_t>{3, 0}); }, {"[pack_padded_sequence]", "above 0"});
  check_error([&] { nn::pack_padded_sequence(x, std::vector<int64_t>{5, 1}); }, {"[pack_padded_sequence]", "longer"});
  check_error([&] { nn::pack_padded_sequence(x, std::vector<int64_t>{3}); }, {"[pack_padded_sequence]", "expected 2"});
  check_error([&] { nn::pack_padded_sequence(x, randn({2})); }, {"[pack_padded_sequence]", "integers"});
  check_error([&] { nn::pack_padded_sequence(randn({4}), std::vector<int64_t>{4}); },
              {"[pack_padded_sequence]", "2 dimensions"});
  const nn::PackedSequence p = nn::pack_padded_sequence(x, std::vector<int64_t>{4, 2});
  check_error([&] { nn::pad_packed_sequence(p, false, 0.0, 3); }, {"[pad_packed_sequence]", "total_length"});
  nn::PackedSequence broken = p;
  broken.batch_sizes = tensor(std::vector<int64_t>{1, 2, 1, 1});
  check_error([&] { nn::pad_packed_sequence(broken); }, {"[pad_packed_sequence]", "non-increasing"});
  broken.batch_sizes = tensor(std::vector<int64_t>{2, 2, 1});
  check_error([&] { nn::pad_packed_sequence(broken); }, {"[pad_packed_sequence]", "6 rows", "5"});
  check_error([&] { nn::pad_sequence({randn({2, 3}), randn({2, 4})}); }, {"[pad_sequence]", "trailing shape"});
  check_error([&] { nn::pad_sequence({}); }, {"[pad_sequence]", "at least one"});
  nn::LSTM lstm(3, 4);
  check_error(
      [&] {
        lstm(nn::pack_padded_sequence(randn({4, 2, 5}), std::vector<int64_t>{4, 2}));
      },
      {"[LSTM]", "input_size", "5"});
  check_error([&] { lstm(p, {randn({1, 3, 4}), randn({1, 3, 4})}); }, {"[LSTM]", "hx", "[1, 2, 4]"});
  nn::PackedSequence half_sorted = nn::pack_padded_sequence(x, std::vector<int64_t>{2, 4}, false, false);
  half_sorted.unsorted_indices = Tensor();
  check_error([&] { lstm(half_sorted); }, {"[LSTM]", "sorted_indices and unsorted_indices"});
  half_sorted.unsorted_indices = tensor(std::vector<int64_t>{1, 5});
  check_error([&] { lstm(half_sorted); }, {"index"});
  // The op itself: batch_sizes that grow, or do not add up to gates_x's rows.
  const Tensor w = randn({8, 2}), h = randn({2, 2}), c = randn({2, 2});
  check_error(
      [&] {
        lstm_recurrence(randn({3, 8}), h, c, w, Tensor(), false, {1, 2});
      },
      {"[lstm_recurrence]", "non-increasing"});
  check_error(
      [&] {
        lstm_recurrence(randn({4, 8}), h, c, w, Tensor(), false, {2, 1});
      },
      {"[lstm_recurrence]", "4 rows", "3"});
  check_error(
      [&] {
        lstm_recurrence(randn({3, 1, 8}), h, c, w, Tensor(), false, {2, 1});
      },
      {"[lstm_recurrence]", "2-d"});
  check_error(
      [&] {
        lstm_recurrence(randn({3, 8}), h, c, w, Tensor(), false, {2, 0, 1});
      },
      {"[lstm_recurrence]", "batch_sizes[1]"});
}

TEST_CASE("LSTM proj_size: PyTorch's weight_hr, shapes; the projected recurrence's gradcheck, full and packed") {
  using autograd::gradcheck;
  manual_seed(14);
  nn::LSTM lstm(5, 6, {.num_layers = 2, .bidirectional = true, .proj_size = 2});
  const auto sd = lstm.state_dict();
  CHECK(sd.at("weight_hr_l0").shape() == Shape{2, 6});
  CHECK(sd.at("weight_hh_l0").shape() == Shape{24, 2});
  CHECK(sd.at("weight_ih_l1").shape() == Shape{24, 4});
  std::vector<std::string> names;
  for (auto& [name, t] : lstm.named_parameters()) names.push_back(name);
  CHECK(names[4] == "weight_hr_l0");  // after the biases, as PyTorch orders them
  auto [y, state] = lstm(randn({3, 4, 5}));
  CHECK(y.shape() == Shape{3, 4, 4});
  CHECK(state.h.shape() == Shape{4, 4, 2});
  CHECK(state.c.shape() == Shape{4, 4, 6});
  CHECK(fmt::format("{}", lstm).find("proj_size=2") != std::string::npos);
  check_error([] { nn::LSTM(3, 4, {.proj_size = 4}); }, {"[LSTM]", "proj_size (4) has to be smaller than hidden_size"});
  check_error([&] { lstm(randn({3, 4, 5}), {randn({4, 4, 6}), randn({4, 4, 6})}); }, {"[LSTM]", "hx", "[4, 4, 2]"});

  const int64_t N = 3, H = 3, P = 2;
  for (bool reverse : {false, true}) {
    for (bool packed : {false, true}) {
      CAPTURE(reverse);
      CAPTURE(packed);
      const std::vector<int64_t> sizes = packed ? std::vector<int64_t>{3, 2, 2, 1} : std::vector<int64_t>{};
      const Tensor gx = packed ? randn({8, 4 * H}, kFloat64) : randn({4, N, 4 * H}, kFloat64);
      CHECK(gradcheck(
          [&](const TensorList& v) {
            auto [out, h, c] = lstm_projected_recurrence(v[0], v[1], v[2], v[3], v[4], v[5], reverse, sizes);
            return cat({out.flatten(), h.flatten() * 2.0, c.flatten() * 3.0});
          },
          {gx, randn({N, P}, kFloat64), randn({N, H}, kFloat64), randn({4 * H, P}, kFloat64), randn({4 * H}, kFloat64),
           randn({P, H}, kFloat64)}));
    }
  }
  check_error(
      [&] {
        lstm_projected_recurrence(randn({2, N, 4 * H}), randn({N, P}), randn({N, H}), randn({4 * H, P}), Tensor(),
                                  randn({H, P}));
      },
      {"[lstm_projected_recurrence]", "w_hr", "[2, 3]"});
}
