// Compares nn::LSTM, nn::GRU and nn::RNN with PyTorch 1.13's on the file tests/tools/rnn_twin.py
// writes: the PyTorch state dict loads by name, and the outputs, final states and the gradients
// of input, initial state and every parameter agree to 1e-5 (float32), time-major, batch-first and
// with a projection (proj_size), on a packed batch of unsorted lengths (pack_padded_sequence, the modules on the
// PackedSequence, pad_packed_sequence). Exit status 1 on a mismatch. Usage: rnn_twin FILE.safetensors
#include <halfgrad.h>

#include <cmath>

using namespace hg;

namespace {
int failures = 0;

void compare(const std::string& what, const Tensor& got, const Tensor& want) {
  if (!got.defined() || got.shape() != want.shape()) {
    fmt::print("{}: shape {} vs PyTorch's {}\n", what, got.defined() ? fmt::format("{}", got.shape()) : "undefined",
               want.shape());
    ++failures;
    return;
  }
  const auto a = got.to_vector<double>(), b = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1e-5 + 1e-5 * std::abs(b[i])));
  if (worst > 1.0) {
    fmt::print("{}: off by {:.2f}x the tolerance (1e-5 + 1e-5 |x|)\n", what, worst);
    ++failures;
  }
}
}  // namespace

// The module of `kind`, its PyTorch parameters loaded, run on x and the initial state.
struct Run {
  std::shared_ptr<nn::Module> module;
  Tensor y, hn, cn;
};
Run run(const std::string& kind, bool batch_first, const StateDict& params, const Tensor& x, const Tensor& h0,
        const Tensor& c0) {
  Run r;
  if (kind.starts_with("lstm")) {
    auto m = std::make_shared<nn::LSTM>(5, 7,
                                        nn::LSTMOptions{.num_layers = 2,
                                                        .batch_first = batch_first,
                                                        .bidirectional = true,
                                                        .proj_size = kind == "lstm_proj" ? 3 : 0});
    m->load_state_dict(params);
    auto [y, state] = (*m)(x, {h0, c0});
    r = {m, y, state.h, state.c};
  } else if (kind == "gru") {
    auto m = std::make_shared<nn::GRU>(
        5, 7, nn::GRUOptions{.num_layers = 2, .batch_first = batch_first, .bidirectional = true});
    m->load_state_dict(params);
    auto [y, hn] = (*m)(x, h0);
    r = {m, y, hn, Tensor()};
  } else {
    auto m = std::make_shared<nn::RNN>(
        5, 7,
        nn::RNNOptions{
            .num_layers = 2, .nonlinearity = kind.substr(4), .batch_first = batch_first, .bidirectional = true});
    m->load_state_dict(params);
    auto [y, hn] = (*m)(x, h0);
    r = {m, y, hn, Tensor()};
  }
  return r;
}

// The same on x [N, L, 5] of the given lengths, packed unsorted; y unpacked batch-first.
struct PackedRun {
  Run run;
  Tensor packed, batch_sizes, lengths;
};
PackedRun run_packed(const std::string& kind, const StateDict& params, const Tensor& x, const Tensor& lengths,
                     const Tensor& h0, const Tensor& c0) {
  const nn::PackedSequence in = nn::pack_padded_sequence(x, lengths, true, false);
  PackedRun r;
  nn::PackedSequence out;
  if (kind.starts_with("lstm")) {
    auto m = std::make_shared<nn::LSTM>(
        5, 7,
        nn::LSTMOptions{
            .num_layers = 2, .batch_first = true, .bidirectional = true, .proj_size = kind == "lstm_proj" ? 3 : 0});
    m->load_state_dict(params);
    auto [y, state] = (*m)(in, {h0, c0});
    out = y;
    r.run = {m, Tensor(), state.h, state.c};
  } else if (kind == "gru") {
    auto m =
        std::make_shared<nn::GRU>(5, 7, nn::GRUOptions{.num_layers = 2, .batch_first = true, .bidirectional = true});
    m->load_state_dict(params);
    auto [y, hn] = (*m)(in, h0);
    out = y;
    r.run = {m, Tensor(), hn, Tensor()};
  } else {
    auto m = std::make_shared<nn::RNN>(
        5, 7,
        nn::RNNOptions{.num_layers = 2, .nonlinearity = kind.substr(4), .batch_first = true, .bidirectional = true});
    m->load_state_dict(params);
    auto [y, hn] = (*m)(in, h0);
    out = y;
    r.run = {m, Tensor(), hn, Tensor()};
  }
  std::tie(r.run.y, r.lengths) = nn::pad_packed_sequence(out, true);
  r.packed = out.data;
  r.batch_sizes = out.batch_sizes;
  return r;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: rnn_twin FILE.safetensors\n");
    return 2;
  }
  const StateDict all = load(argv[1]);
  int compared = 0;
  for (const std::string kind : {"lstm", "lstm_proj", "gru", "rnn_tanh", "rnn_relu"}) {
    for (const bool batch_first : {true, false}) {
      const std::string name = kind + (batch_first ? "_bf" : "_tm");
      const StateDict t = strip_prefix(all, name + ".");
      const bool lstm = kind.starts_with("lstm");
      Tensor x = t.at("x").clone().requires_grad_(), h0 = t.at("h0").clone().requires_grad_();
      Tensor c0 = lstm ? t.at("c0").clone().requires_grad_() : Tensor();
      Run r = run(kind, batch_first, strip_prefix(t, "param."), x, h0, c0);
      Tensor loss = (r.y * t.at("wy")).sum() + (r.hn * t.at("wh")).sum();
      if (lstm) loss = loss + (r.cn * t.at("wc")).sum();
      loss.backward();
      std::vector<std::pair<std::string, Tensor>> checks = {
          {"y", r.y}, {"hn", r.hn}, {"grad.x", x.grad()}, {"grad.h0", h0.grad()}};
      if (lstm) checks.insert(checks.end(), {{"cn", r.cn}, {"grad.c0", c0.grad()}});
      for (auto& [pname, p] : r.module->named_parameters()) checks.emplace_back("grad." + pname, p.grad());
      for (auto& [what, got] : checks) {
        compare(name + " " + what, got, t.at(what));
        ++compared;
      }
    }
  }
  for (const std::string kind : {"lstm", "lstm_proj", "gru", "rnn_tanh", "rnn_relu"}) {
    const std::string name = kind + "_packed";
    const StateDict t = strip_prefix(all, name + ".");
    const bool lstm = kind.starts_with("lstm");
    Tensor x = t.at("x").clone().requires_grad_(), h0 = t.at("h0").clone().requires_grad_();
    Tensor c0 = lstm ? t.at("c0").clone().requires_grad_() : Tensor();
    PackedRun p = run_packed(kind, strip_prefix(t, "param."), x, t.at("lengths"), h0, c0);
    Tensor loss = (p.run.y * t.at("wy")).sum() + (p.run.hn * t.at("wh")).sum();
    if (lstm) loss = loss + (p.run.cn * t.at("wc")).sum();
    loss.backward();
    std::vector<std::pair<std::string, Tensor>> checks = {
        {"y", p.run.y},         {"hn", p.run.hn},     {"packed", p.packed},  {"batch_sizes", p.batch_sizes},
        {"lengths", p.lengths}, {"grad.x", x.grad()}, {"grad.h0", h0.grad()}};
    if (lstm) checks.insert(checks.end(), {{"cn", p.run.cn}, {"grad.c0", c0.grad()}});
    for (auto& [pname, param] : p.run.module->named_parameters()) checks.emplace_back("grad." + pname, param.grad());
    for (auto& [what, got] : checks) {
      compare(name + " " + what, got, t.at(what));
      ++compared;
    }
  }
  fmt::print("rnn_twin: {} tensors compared with PyTorch's, {} off\n", compared, failures);
  return failures ? 1 : 0;
}
