// nn::LSTM, nn::GRU, nn::RNN and their recurrence ops: every option combination's shapes, values
// and gradients against a float64 step-by-step composition of public ops, finite differences,
// dropout, hooks, parameter names, autocast and bad input. (Against PyTorch itself:
// tests/tools/rnn_twin.sh.)
#include <map>

#include "helpers.h"

using namespace hg;
using hg::test::check_close;
using hg::test::check_error;

namespace {
enum class Kind { Lstm, Gru, Tanh, Relu };

// One layer and direction, step by step in public ops: x [L, N, in], h0/c0 [N, H].
std::tuple<Tensor, Tensor, Tensor> reference_layer(Kind kind, const Tensor& x, Tensor h, Tensor c,
                                                   const std::map<std::string, Tensor>& p, const std::string& sfx) {
  const Tensor b_ih = p.count("bias_ih" + sfx) ? p.at("bias_ih" + sfx) : Tensor();
  const Tensor b_hh = p.count("bias_hh" + sfx) ? p.at("bias_hh" + sfx) : Tensor();
  const bool reverse = sfx.ends_with("_reverse");
  const int64_t steps = x.size(0);
  TensorList outs(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const Tensor gi = linear(x.select(0, t), p.at("weight_ih" + sfx), b_ih);
    const Tensor gh = linear(h, p.at("weight_hh" + sfx), b_hh);
    if (kind == Kind::Lstm) {
      const auto gs = (gi + gh).chunk(4, 1);
      c = sigmoid(gs[1]) * c + sigmoid(gs[0]) * tanh(gs[2]);
      h = sigmoid(gs[3]) * tanh(c);
    } else if (kind == Kind::Gru) {
      const auto a = gi.chunk(3, 1), b = gh.chunk(3, 1);
      const Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]);
      const Tensor n = tanh(a[2] + r * b[2]);
      h = (1.0 - z) * n + z * h;
    } else {
      h = kind == Kind::Tanh ? tanh(gi + gh) : relu(gi + gh);
    }
    outs[static_cast<size_t>(t)] = h;
  }
  return {stack(outs, 0), h, c};
}

struct Config {
  int64_t layers;
  bool bias, batch_first, bidirectional;
};

// The whole module (no dropout) from its named parameters; x [L, N, in] (time-major).
std::tuple<Tensor, Tensor, Tensor> reference(Kind kind, const Config& cfg, const nn::Module& m, Tensor x,
                                             const Tensor& h0, const Tensor& c0) {
  std::map<std::string, Tensor> p;
  for (auto& [name, t] : m.named_parameters()) p[name] = t;
  const int64_t dirs = cfg.bidirectional ? 2 : 1;
  TensorList hs, cs;
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    TensorList outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t k = layer * dirs + d;
      const std::string sfx = fmt::format("_l{}{}", layer, d ? "_reverse" : "");
      auto [o, h, c] = reference_layer(kind, x, h0.select(0, k), c0.defined() ? c0.select(0, k) : Tensor(), p, sfx);
      outs.push_back(o);
      hs.push_back(h);
      if (c.defined()) cs.push_back(c);
    }
    x = dirs == 2 ? cat(outs, 2) : outs[0];
  }
  return {x, stack(hs, 0), cs.empty() ? Tensor() : stack(cs, 0)};
}

// Runs a module of `kind` and returns output, h_n, c_n.
struct AnyRnn {
  std::shared_ptr<nn::Module> module;
  std::function<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&)> run;
};
AnyRnn make_rnn(Kind kind, int64_t in, int64_t hidden, const Config& c, double dropout = 0.0) {
  AnyRnn r;
  if (kind == Kind::Lstm) {
    auto m = std::make_shared<nn::LSTM>(in, hidden,
                                        nn::LSTMOptions{c.layers, c.bias, c.batch_first, dropout, c.bidirectional});
    r.run = [m](const Tensor& x, const Tensor& h, const Tensor& cc) {
      auto [y, s] = (*m)(x, nn::LSTMState{h, cc});
      return std::tuple{y, s.h, s.c};
    };
    r.module = m;
  } else if (kind == Kind::Gru) {
    auto m = std::make_shared<nn::GRU>(in, hidden,
                                       nn::GRUOptions{c.layers, c.bias, c.batch_first, dropout, c.bidirectional});
    r.run = [m](const Tensor& x, const Tensor& h, const Tensor&) {
      auto [y, hn] = (*m)(x, h);
      return std::tuple{y, hn, Tensor()};
    };
    r.module = m;
  } else {
    auto m = std::make_shared<nn::RNN>(in, hidden,
                                       nn::RNNOptions{c.layers, kind == Kind::Tanh ? "tanh" : "relu", c.bias,
                                                      c.batch_first, dropout, c.bidirectional});
    r.run = [m](const Tensor& x, const Tensor& h, const Tensor&) {
      auto [y, hn] = (*m)(x, h);
      return std::tuple{y, hn, Tensor()};
    };
    r.module = m;
  }
  return r;
}

const Kind kKinds[] = {Kind::Lstm, Kind::Gru, Kind::Tanh, Kind::Relu};
}  // namespace

TEST_CASE(
    "LSTM, GRU and RNN: every option combination's shapes, values and gradients against a step-by-step "
    "float64 reference") {
  manual_seed(1);
  const int64_t L = 3, N = 2, in = 4, H = 3;
  for (Kind kind : kKinds) {
    for (int mask = 0; mask < 16; ++mask) {
      const Config cfg{mask & 1 ? 2 : 1, (mask & 2) == 0, (mask & 4) != 0, (mask & 8) != 0};
      for (bool batched : {true, false}) {
        CAPTURE(static_cast<int>(kind));
        CAPTURE(mask);
        CAPTURE(batched);
        AnyRnn r = make_rnn(kind, in, H, cfg);
        r.module->to(kFloat64);
        const int64_t D = cfg.bidirectional ? 2 : 1;
        const Tensor x_tm = randn({L, N, in}, kFloat64);  // time-major values
        Tensor x =
            batched ? (cfg.batch_first ? x_tm.transpose(0, 1).contiguous() : x_tm.clone()) : x_tm.select(1, 0).clone();
        x.requires_grad_();
        Tensor h0 = randn({cfg.layers * D, N, H}, kFloat64), c0 = randn({cfg.layers * D, N, H}, kFloat64);
        Tensor h0_in = batched ? h0.clone() : h0.select(1, 0).clone(),
               c0_in = batched ? c0.clone() : c0.select(1, 0).clone();
        h0_in.requires_grad_();
        c0_in.requires_grad_();
        const bool lstm = kind == Kind::Lstm;
        auto [y, hn, cn] = r.run(x, h0_in, lstm ? c0_in : Tensor());
        // Shapes as PyTorch's.
        const Shape y_shape = !batched ? Shape{L, D * H} : cfg.batch_first ? Shape{N, L, D * H} : Shape{L, N, D * H};
        const Shape h_shape = batched ? Shape{cfg.layers * D, N, H} : Shape{cfg.layers * D, H};
        CHECK(y.shape() == y_shape);
        CHECK(hn.shape() == h_shape);
        if (lstm) CHECK(cn.shape() == h_shape);
        // Values against the reference (time-major; the unbatched case is batch 1).
        const int64_t nb = batched ? N : 1;
        const Tensor xr = batched ? x_tm : x_tm.select(1, 0).unsqueeze(1);
        const Tensor h0r = h0.slice(1, 0, nb), c0r = c0.slice(1, 0, nb);
        auto [ry, rh, rc] = reference(kind, cfg, *r.module, xr.detach().requires_grad_(), h0r, lstm ? c0r : Tensor());
        const Tensor y_tm = !batched ? y.unsqueeze(1) : cfg.batch_first ? y.transpose(0, 1) : y;
        check_close(y_tm, ry.detach(), {1e-12, 1e-10});
        check_close(batched ? hn : hn.unsqueeze(1), rh.detach(), {1e-12, 1e-10});
        if (lstm) check_close(batched ? cn : cn.unsqueeze(1), rc.detach(), {1e-12, 1e-10});
        // Parameter gradients against the reference's, for a loss that reads every output.
        const Tensor wy = randn(y_tm.shape(), kFloat64), wh = randn(rh.shape(), kFloat64);
        r.module->zero_grad();
        Tensor loss = (y_tm * wy).sum() + ((batched ? hn : hn.unsqueeze(1)) * wh).sum();
        if (lstm) loss = loss + (batched ? cn : cn.unsqueeze(1)).sum();
        loss.backward();
        std::map<std::string, Tensor> got;
        for (auto& [name, t] : r.module->named_parameters()) got[name] = t.grad().clone();
        r.module->zero_grad();
        Tensor rloss = (ry * wy).sum() + (rh * wh).sum();
        if (lstm) rloss = rloss + rc.sum();
        rloss.backward();
        for (auto& [name, t] : r.module->named_parameters()) {
          const std::string& param_name = name;  // clang 14 cannot capture a structured binding
          CAPTURE(param_name);
          check_close(got[name], t.grad(), {1e-12, 1e-9});
        }
        CHECK(x.grad().shape() == x.shape());
        CHECK(h0_in.grad().shape() == h0_in.shape());
      }
    }
  }
}

TEST_CASE("lstm_recurrence, gru_recurrence and rnn_recurrence: gradcheck (both directions, with and without b_hh)") {
  using autograd::gradcheck;
  manual_seed(2);
  const int64_t L = 4, N = 3, H = 2;
  for (bool reverse : {false, true}) {
    for (bool bias : {true, false}) {
      CAPTURE(reverse);
      CAPTURE(bias);
      const Tensor b4 = bias ? randn({4 * H}, kFloat64) : Tensor(), b3 = bias ? randn({3 * H}, kFloat64) : Tensor();
      CHECK(gradcheck(
          [&](const TensorList& v) {
            auto [y, h, c] = lstm_recurrence(v[0], v[1], v[2], v[3], bias ? v[4] : Tensor(), reverse);
            return cat({y.flatten(), h.flatten() * 2.0, c.flatten() * 3.0});
          },
          {randn({L, N, 4 * H}, kFloat64), randn({N, H}, kFloat64), randn({N, H}, kFloat64),
           randn({4 * H, H}, kFloat64), bias ? b4 : randn({1}, kFloat64)}));
      CHECK(gradcheck(
          [&](const TensorList& v) {
            auto [y, h] = gru_recurrence(v[0], v[1], v[2], bias ? v[3] : Tensor(), reverse);
            return cat({y.flatten(), h.flatten() * 2.0});
          },
          {randn({L, N, 3 * H}, kFloat64), randn({N, H}, kFloat64), randn({3 * H, H}, kFloat64),
           bias ? b3 : randn({1}, kFloat64)}));
      for (bool relu : {false, true}) {
        CHECK(gradcheck(
            [&](const TensorList& v) {
              auto [y, h] = rnn_recurrence(v[0], v[1], v[2], bias ? v[3] : Tensor(), relu, reverse);
              return cat({y.flatten(), h.flatten() * 2.0});
            },
            {randn({L, N, H}, kFloat64), randn({N, H}, kFloat64), randn({H, H}, kFloat64) * 0.5,
             bias ? randn({H}, kFloat64) : randn({1}, kFloat64)}));
      }
    }
  }
  // Only part of the outputs used (the others' gradients arrive undefined).
  CHECK(gradcheck([](const TensorList& v) { return std::get<2>(lstm_recurrence(v[0], v[1], v[2], v[3], v[4])); },
                  {randn({L, N, 4 * H}, kFloat64), randn({N, H}, kFloat64), randn({N, H}, kFloat64),
                   randn({4 * H, H}, kFloat64), randn({4 * H}, kFloat64)}));
  CHECK(gradcheck([](const TensorList& v) { return std::get<0>(gru_recurrence(v[0], v[1], v[2], v[3])); },
                  {randn({L, N, 3 * H}, kFloat64), randn({N, H}, kFloat64), randn({3 * H, H}, kFloat64),
                   randn({3 * H}, kFloat64)}));
}

TEST_CASE("LSTM, GRU and RNN modules: gradcheck through input and initial state (2 layers, bidirectional)") {
  using autograd::gradcheck;
  manual_seed(3);
  for (Kind kind : kKinds) {
    CAPTURE(static_cast<int>(kind));
    AnyRnn r = make_rnn(kind, 3, 2, Config{2, true, true, true});
    r.module->to(kFloat64);
    const bool lstm = kind == Kind::Lstm;
    CHECK(gradcheck(
        [&](const TensorList& v) {
          auto [y, h, c] = r.run(v[0], v[1], lstm ? v[2] : Tensor());
          return lstm ? cat({y.flatten(), h.flatten(), c.flatten()}) : cat({y.flatten(), h.flatten()});
        },
        {randn({2, 3, 3}, kFloat64), randn({4, 2, 2}, kFloat64), randn({4, 2, 2}, kFloat64)}));
  }
}
