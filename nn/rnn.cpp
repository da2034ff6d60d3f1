#include "nn/rnn.h"

#include <cmath>
#include <mutex>
#include <optional>

#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/matmul.h"
#include "framework/ops/nn_misc.h"
#include "framework/ops/rnn.h"
#include "nn/init.h"

namespace hg::nn {
namespace detail {
namespace {
const char* recurrent_name(RecurrentMode mode) {
  switch (mode) {
    case RecurrentMode::Lstm: return "LSTM";
    case RecurrentMode::Gru: return "GRU";
    default: return "RNN";
  }
}
int64_t recurrent_gates(RecurrentMode mode) {
  return mode == RecurrentMode::Lstm ? 4 : mode == RecurrentMode::Gru ? 3 : 1;
}
}  // namespace

Recurrent::Recurrent(Module& owner, RecurrentMode mode, int64_t input_size, int64_t hidden_size, Options options)
    : name_(recurrent_name(mode)), mode_(mode), input_size_(input_size), hidden_size_(hidden_size), options_(options) {
  HG_CHECK(input_size > 0, name_, "input_size must be greater than zero, got {}", input_size);
  HG_CHECK(hidden_size > 0, name_, "hidden_size must be greater than zero, got {}", hidden_size);
  HG_CHECK(options.num_layers > 0, name_, "num_layers must be greater than zero, got {}", options.num_layers);
  HG_CHECK(options.proj_size >= 0, name_,
           "proj_size should be a positive integer or zero to disable projections, got {}", options.proj_size);
  HG_CHECK(options.proj_size < hidden_size, name_, "proj_size ({}) has to be smaller than hidden_size ({})",
           options.proj_size, hidden_size);
  HG_CHECK(options.dropout >= 0 && options.dropout <= 1, name_,
           "dropout should be a number in range [0, 1] representing the probability of an element being zeroed, "
           "got {}",
           options.dropout);
  // As PyTorch: dropout on a one-layer module does nothing, which is almost always a mistake.
  if (options.dropout > 0 && options.num_layers == 1) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      fmt::print(stderr,
                 "halfgrad warning: {}: dropout adds dropout after all but the last recurrent layer, so a non-zero "
                 "dropout expects num_layers greater than 1, but got dropout={} and num_layers=1 (this warning is "
                 "shown once)\n",
                 name_, options.dropout);
    });
  }
  // PyTorch's initialisation: every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H)).
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  const int64_t gates = recurrent_gates(mode) * hidden_size, dirs = options.bidirectional ? 2 : 1;
  const int64_t width = state_size();
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t in = layer == 0 ? input_size : width * dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = fmt::format("_l{}{}", layer, d == 1 ? "_reverse" : "");
      std::array<Tensor*, 5> slots{};
      // PyTorch's order: the biases before weight_hr.
      const std::pair<const char*, Shape> specs[5] = {{"weight_ih", {gates, in}},
                                                      {"weight_hh", {gates, width}},
                                                      {"bias_ih", {gates}},
                                                      {"bias_hh", {gates}},
                                                      {"weight_hr", {width, hidden_size}}};
      for (int k = 0; k < 5; ++k) {
        if ((k == 2 || k == 3) && !options.bias) continue;
        if (k == 4 && options.proj_size == 0) continue;
        Tensor& slot = owner.register_parameter(specs[k].first + suffix, empty(specs[k].second));
        init::uniform_(slot, -bound, bound);
        slots[static_cast<size_t>(k)] = &slot;
      }
      weights_.push_back(slots);
    }
  }
}

std::string Recurrent::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size_, hidden_size_);
  if (options_.num_layers != 1) s += fmt::format(", num_layers={}", options_.num_layers);
  if (mode_ == RecurrentMode::RnnRelu) s += ", nonlinearity=relu";
  if (!options_.bias) s += ", bias=false";
  if (options_.batch_first) s += ", batch_first=true";
  if (options_.dropout != 0) s += fmt::format(", dropout={}", options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=true";
  if (options_.proj_size > 0) s += fmt::format(", proj_size={}", options_.proj_size);
  return s;
}

Tensor Recurrent::initial_state(const Tensor& t, const char* what, const Shape& shape, const Tensor& like) const {
  if (!t.defined()) return zeros(shape, TensorOptions(like.dtype()).device(like.device()));
  HG_CHECK(t.shape() == shape, name_, "expected {} of shape {}, got {}", what, shape, t.shape());
  HG_CHECK(t.device() == like.device(), name_, "{} is on {} but the input is on {}", what, t.device(), like.device());
  return t;
}

std::tuple<Tensor, Tensor, Tensor> Recurrent::layers(Tensor x, const Tensor& h0, const Tensor& c0, bool training,
                                                     const std::vector<int64_t>& batch_sizes) const {
  const bool lstm = mode_ == RecurrentMode::Lstm;
  const int64_t dirs = options_.bidirectional ? 2 : 1;
  TensorList h_n, c_n;
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    TensorList outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t k = layer * dirs + d;
      const auto& w = weights_[static_cast<size_t>(k)];
      const Tensor b_ih = w[2] ? *w[2] : Tensor(), b_hh = w[3] ? *w[3] : Tensor();
      const Tensor gx = linear(x, *w[0], b_ih);
      Tensor out, h, c;
      if (lstm && w[4]) {
        std::tie(out, h, c) =
            lstm_projected_recurrence(gx, h0.select(0, k), c0.select(0, k), *w[1], b_hh, *w[4], d == 1, batch_sizes);
        c_n.push_back(c);
      } else if (lstm) {
        std::tie(out, h, c) = lstm_recurrence(gx, h0.select(0, k), c0.select(0, k), *w[1], b_hh, d == 1, batch_sizes);
        c_n.push_back(c);
      } else if (mode_ == RecurrentMode::Gru) {
        std::tie(out, h) = gru_recurrence(gx, h0.select(0, k), *w[1], b_hh, d == 1, batch_sizes);
      } else {
        std::tie(out, h) =
            rnn_recurrence(gx, h0.select(0, k), *w[1], b_hh, mode_ == RecurrentMode::RnnRelu, d == 1, batch_sizes);
      }
      outs.push_back(out);
      h_n.push_back(h);
    }
    x = dirs == 2 ? cat(outs, x.dim() - 1) : outs[0];
    if (options_.dropout > 0 && training && layer + 1 < options_.num_layers) x = dropout(x, options_.dropout, true);
  }
  return {x, stack(h_n, 0), lstm ? stack(c_n, 0) : Tensor()};
}

std::tuple<Tensor, Tensor, Tensor> Recurrent::run(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in,
                                                  bool training) const {
  const bool lstm = mode_ == RecurrentMode::Lstm;
  HG_CHECK(input.defined(), name_, "the input is undefined");
  HG_CHECK(input.dim() == 2 || input.dim() == 3, name_, "expected input to be 2-D or 3-D but received {}-D tensor",
           input.dim());
  HG_CHECK(input.size(-1) == input_size_, name_,
           "input.size(-1) must be equal to input_size. Expected {}, got {} (input shape {})", input_size_,
           input.size(-1), input.shape());
  const bool batched = input.dim() == 3;
  // [L, N, in] from here on (unbatched: N = 1).
  Tensor x = !batched ? input.unsqueeze(1) : options_.batch_first ? input.transpose(0, 1) : input;
  HG_CHECK(x.size(0) > 0, name_, "expected a sequence length above 0, got input shape {}", input.shape());
  const int64_t dirs = options_.bidirectional ? 2 : 1, batch = x.size(1);
  auto check_state = [&](const Tensor& t, const char* what, int64_t features) -> Tensor {
    const Shape state_shape =
        batched ? Shape{options_.num_layers * dirs, batch, features} : Shape{options_.num_layers * dirs, features};
    if (!t.defined()) return initial_state(t, what, {options_.num_layers * dirs, batch, features}, x);
    HG_CHECK(batched || t.dim() == 2, name_, "for unbatched 2-D input, {} should also be 2-D but got {}-D tensor", what,
             t.dim());
    HG_CHECK(!batched || t.dim() == 3, name_, "for batched 3-D input, {} should also be 3-D but got {}-D tensor", what,
             t.dim());
    const Tensor s = initial_state(t, what, state_shape, x);
    return batched ? s : s.unsqueeze(1);
  };
  const Tensor h0 = check_state(h0_in, "hx", state_size());
  const Tensor c0 = lstm ? check_state(c0_in, "cx", hidden_size_) : Tensor();
  auto [y, h, c] = layers(x, h0, c0, training, {});
  if (!batched) {
    y = y.squeeze(1);
    h = h.squeeze(1);
    if (lstm) c = c.squeeze(1);
  } else if (options_.batch_first) {
    y = y.transpose(0, 1);
  }
  return {y, h, c};
}

std::tuple<PackedSequence, Tensor, Tensor> Recurrent::run(const PackedSequence& input, const Tensor& h0_in,
                                                          const Tensor& c0_in, bool training) const {
  const bool lstm = mode_ == RecurrentMode::Lstm;
  HG_CHECK(input.data.defined() && input.data.dim() == 2, name_,
           "expected packed data of 2 dimensions [sum of lengths, input_size], got {}",
           input.data.defined() ? fmt::format("shape {}", input.data.shape()) : std::string("undefined data"));
  HG_CHECK(input.data.size(1) == input_size_, name_,
           "input.size(-1) must be equal to input_size. Expected {}, got {} (packed data shape {})", input_size_,
           input.data.size(1), input.data.shape());
  HG_CHECK(input.batch_sizes.defined() && input.batch_sizes.dim() == 1 && input.batch_sizes.numel() > 0 &&
               input.batch_sizes.device().type == kCPU,
           name_, "a PackedSequence's batch_sizes must be a non-empty 1-d CPU tensor (pack_padded_sequence makes one)");
  HG_CHECK(input.sorted_indices.defined() == input.unsorted_indices.defined(), name_,
           "a PackedSequence needs both sorted_indices and unsorted_indices, or neither (pack_padded_sequence sets "
           "them together)");
  const std::vector<int64_t> sizes = input.batch_sizes.to(kInt64).to_vector<int64_t>();
  const int64_t dirs = options_.bidirectional ? 2 : 1, batch = sizes[0];

  // The user's states are in the batch's original order; the recurrence runs in sorted order.
  const bool sorted = input.sorted_indices.defined();
  auto sorted_state = [&](const Tensor& t, const char* what, int64_t features) {
    const Tensor s = initial_state(t, what, {options_.num_layers * dirs, batch, features}, input.data);
    return sorted && t.defined() ? index_select(s, 1, input.sorted_indices.to(s.device())) : s;
  };
  const Tensor h0 = sorted_state(h0_in, "hx", state_size());
  const Tensor c0 = lstm ? sorted_state(c0_in, "cx", hidden_size_) : Tensor();
  auto [y, h, c] = layers(input.data, h0, c0, training, sizes);
  if (sorted) {
    const Tensor back = input.unsorted_indices.to(h.device());
    h = index_select(h, 1, back);
    if (lstm) c = index_select(c, 1, back);
  }
  PackedSequence out = input;
  out.data = y;
  return {out, h, c};
}
}  // namespace detail

namespace {
// A packed call inside the module's forward hooks, which see (and may replace) the packed data.
template <class Result, class RunHooked, class Body>
Result packed_call(bool hooks, const PackedSequence& input, const RunHooked& run_hooked, const Body& body) {
  if (!hooks) return body(input);
  std::optional<Result> full;
  Tensor data = run_hooked(input.data, [&](const Tensor& d) {
    PackedSequence in = input;
    in.data = d;
    full.emplace(body(in));
    return full->output.data;
  });
  full->output.data = std::move(data);
  return std::move(*full);
}

detail::Recurrent::Options core_options(const auto& o) {
  return {o.num_layers, o.bias, o.batch_first, o.dropout, o.bidirectional};
}
detail::Recurrent::Options lstm_options(const LSTMOptions& o) {
  detail::Recurrent::Options core = core_options(o);
  core.proj_size = o.proj_size;
  return core;
}
detail::RecurrentMode rnn_mode(const std::string& nonlinearity) {
  HG_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", "RNN",
           "Unknown nonlinearity '{}'. Select from 'tanh' or 'relu'.", nonlinearity);
  return nonlinearity == "tanh" ? detail::RecurrentMode::RnnTanh : detail::RecurrentMode::RnnRelu;
}
}  // namespace

LSTM::LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions options)
    : CallableModule("LSTM"),
      core_(*this, detail::RecurrentMode::Lstm, input_size, hidden_size, lstm_options(options)) {}

LSTMOutput LSTM::forward(const Tensor& input, const LSTMState& state) {
  HG_CHECK(state.h.defined() == state.c.defined(), "LSTM",
           "give both h and c of the initial state, or neither (got only {})", state.h.defined() ? "h" : "c");
  auto [y, h, c] = core_.run(input, state.h, state.c, is_training());
  return {y, {h, c}};
}

LSTMPackedOutput LSTM::forward(const PackedSequence& input, const LSTMState& state) {
  HG_CHECK(state.h.defined() == state.c.defined(), "LSTM",
           "give both h and c of the initial state, or neither (got only {})", state.h.defined() ? "h" : "c");
  auto [y, h, c] = core_.run(input, state.h, state.c, is_training());
  return {y, {h, c}};
}

LSTMPackedOutput LSTM::operator()(const PackedSequence& input, const LSTMState& state) {
  return packed_call<LSTMPackedOutput>(
      has_forward_hooks(), input, [this](const Tensor& x, const auto& f) { return run_hooked(x, f); },
      [&](const PackedSequence& in) { return forward(in, state); });
}

GRU::GRU(int64_t input_size, int64_t hidden_size, GRUOptions options)
    : CallableModule("GRU"), core_(*this, detail::RecurrentMode::Gru, input_size, hidden_size, core_options(options)) {}

RNNOutput GRU::forward(const Tensor& input, const Tensor& h0) {
  auto [y, h, c] = core_.run(input, h0, Tensor(), is_training());
  return {y, h};
}

RNNPackedOutput GRU::forward(const PackedSequence& input, const Tensor& h0) {
  auto [y, h, c] = core_.run(input, h0, Tensor(), is_training());
  return {y, h};
}

RNNPackedOutput GRU::operator()(const PackedSequence& input, const Tensor& h0) {
  return packed_call<RNNPackedOutput>(
      has_forward_hooks(), input, [this](const Tensor& x, const auto& f) { return run_hooked(x, f); },
      [&](const PackedSequence& in) { return forward(in, h0); });
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : CallableModule("RNN"),
      core_(*this, rnn_mode(options.nonlinearity), input_size, hidden_size, core_options(options)) {}

RNNOutput RNN::forward(const Tensor& input, const Tensor& h0) {
  auto [y, h, c] = core_.run(input, h0, Tensor(), is_training());
  return {y, h};
}

RNNPackedOutput RNN::forward(const PackedSequence& input, const Tensor& h0) {
  auto [y, h, c] = core_.run(input, h0, Tensor(), is_training());
  return {y, h};
}

RNNPackedOutput RNN::operator()(const PackedSequence& input, const Tensor& h0) {
  return packed_call<RNNPackedOutput>(
      has_forward_hooks(), input, [this](const Tensor& x, const auto& f) { return run_hooked(x, f); },
      [&](const PackedSequence& in) { return forward(in, h0); });
}

}  // namespace hg::nn
