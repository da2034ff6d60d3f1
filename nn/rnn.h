// LSTM, GRU and RNN (tanh or relu) as PyTorch's nn.LSTM, nn.GRU and nn.RNN: the same options,
// shapes, parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, "_reverse" for
// the backward direction), gate order and initialisation, so a PyTorch state dict loads.
//
// How a layer runs (one direction): x @ W_ih^T + b_ih for all time steps in one linear() (one
// GEMM), then one recurrence op (lstm_recurrence, gru_recurrence, rnn_recurrence in
// framework/ops/rnn.h) that runs the steps: h @ W_hh^T and one fused gate kernel each, and in
// backward one fused gradient kernel and dgates @ W_hh per step, with W_hh's gradient as one GEMM
// over all steps. Autograd records about three nodes per layer and direction, not several per
// step. Measured on the 2-vCPU Zen 4 (docs/BENCHMARKS.md, "LSTM"): seq 64, batch 32, 128 -> 256,
// 2 layers, one thread, forward+backward 257 ms fp32 and 152 ms under bfloat16 autocast, against
// PyTorch 1.13's nn.LSTM at 385 and 247 ms in the same run; 77% of halfgrad's time is in oneDNN's
// GEMM kernels and about 15% in the two cell kernels. oneDNN's RNN primitive runs the same
// per-step GEMMs on the same kernels, so it could win back part of the remaining ~20% at best,
// and needs its own weight layout (a reorder per call, or weights a PyTorch state dict does not
// load as is); cuDNN's RNN API likewise. Neither is implemented: the GEMM-plus-fused-cell design
// runs on every backend the GEMM runs on. (CUDA is unmeasured here, no GPU: cuDNN's persistent
// kernels may win there at small batch, where a step is two launches.) Autocast lowers the GEMMs:
// linear and the recurrence ops are on the lower-precision list, as PyTorch's lstm_cell/gru_cell/
// _cudnn_rnn on CUDA.
#pragma once

#include <array>
#include <string>
#include <tuple>
#include <vector>

#include "nn/module.h"
#include "nn/packed_sequence.h"

namespace hg::nn {

struct LSTMOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // input and output [N, L, features] instead of [L, N, features]
  double dropout = 0.0;      // on each layer's output but the last, in training
  bool bidirectional = false;
  // > 0: h = (o tanh(c)) W_hr^T with W_hr [proj_size, hidden_size] (weight_hr_l*), so h, the
  // output and h0 have proj_size features (c keeps hidden_size); 0 < proj_size < hidden_size.
  int64_t proj_size = 0;
};
struct GRUOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
  bool bidirectional = false;
};
struct RNNOptions {
  int64_t num_layers = 1;
  std::string nonlinearity = "tanh";  // or "relu"
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;
  bool bidirectional = false;
};

// h and c [D * num_layers, N, H] (D = 2 when bidirectional), or [D * num_layers, H] for an
// unbatched input; undefined = zeros. With proj_size P, h is [D * num_layers, N, P].
struct LSTMState {
  Tensor h, c;
};
// auto [output, state] = lstm(x, state): output [L, N, D * H] ([N, L, D * H] batch_first, [L, D * H]
// unbatched) holds the last layer's h at every step; state the final h and c of every layer.
struct LSTMOutput {
  Tensor output;
  LSTMState state;
};
// GRU and RNN: auto [output, h_n] = gru(x, h0).
struct RNNOutput {
  Tensor output;
  Tensor h_n;
};
// A PackedSequence in, a PackedSequence out (the same batch_sizes and indices): each state is
// the sequence's own after its last step, in the batch's original order.
struct LSTMPackedOutput {
  PackedSequence output;
  LSTMState state;
};
struct RNNPackedOutput {
  PackedSequence output;
  Tensor h_n;
};

namespace detail {
enum class RecurrentMode { Lstm, Gru, RnnTanh, RnnRelu };
// What the three modules share: checked options, the parameters (in PyTorch's order) and the
// layer loop. Not a Module itself, so each module derives from CallableModule<Self>.
class Recurrent {
 public:
  struct Options {
    int64_t num_layers;
    bool bias, batch_first;
    double dropout;
    bool bidirectional;
    int64_t proj_size = 0;  // LSTM only
  };
  Recurrent(Module& owner, RecurrentMode mode, int64_t input_size, int64_t hidden_size, Options options);
  // output, h_n, c_n (c only for LSTM).
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0, const Tensor& c0, bool training) const;
  std::tuple<PackedSequence, Tensor, Tensor> run(const PackedSequence& input, const Tensor& h0, const Tensor& c0,
                                                 bool training) const;
  std::string extra_repr() const;

 private:
  const char* name_;
  RecurrentMode mode_;
  int64_t input_size_, hidden_size_;
  Options options_;
  // Per layer and direction: weight_ih, weight_hh, bias_ih, bias_hh, weight_hr (the module's slots).
  std::vector<std::array<Tensor*, 5>> weights_;
  // h's features: proj_size when set, else hidden_size.
  int64_t state_size() const { return options_.proj_size > 0 ? options_.proj_size : hidden_size_; }

  // x [L, N, in] (or packed [T, in] with batch_sizes), h0 and c0 [layers * D, N, H]: the stacked
  // layers' output and final h and c.
  std::tuple<Tensor, Tensor, Tensor> layers(Tensor x, const Tensor& h0, const Tensor& c0, bool training,
                                            const std::vector<int64_t>& batch_sizes) const;
  // An initial state checked against `shape` (zeros when undefined).
  Tensor initial_state(const Tensor& t, const char* what, const Shape& shape, const Tensor& like) const;
};
}  // namespace detail

class LSTM : public CallableModule<LSTM> {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions options = {});
  LSTMOutput forward(const Tensor& input, const LSTMState& state = {});
  using CallableModule::operator();
  // lstm(x, {h0, c0}): a braced state, which the variadic call cannot deduce.
  LSTMOutput operator()(const Tensor& input, const LSTMState& state) {
    return CallableModule::operator()(input, state);
  }
  LSTMPackedOutput forward(const PackedSequence& input, const LSTMState& state = {});
  LSTMPackedOutput operator()(const PackedSequence& input, const LSTMState& state = {});
  std::string extra_repr() const override { return core_.extra_repr(); }

 private:
  detail::Recurrent core_;
};

class GRU : public CallableModule<GRU> {
 public:
  GRU(int64_t input_size, int64_t hidden_size, GRUOptions options = {});
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor());
  using CallableModule::operator();
  RNNPackedOutput forward(const PackedSequence& input, const Tensor& h0 = Tensor());
  RNNPackedOutput operator()(const PackedSequence& input, const Tensor& h0 = Tensor());
  std::string extra_repr() const override { return core_.extra_repr(); }

 private:
  detail::Recurrent core_;
};

// Elman RNN: h' = tanh (or relu) of x W_ih^T + b_ih + h W_hh^T + b_hh.
class RNN : public CallableModule<RNN> {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor());
  using CallableModule::operator();
  RNNPackedOutput forward(const PackedSequence& input, const Tensor& h0 = Tensor());
  RNNPackedOutput operator()(const PackedSequence& input, const Tensor& h0 = Tensor());
  std::string extra_repr() const override { return core_.extra_repr(); }

 private:
  detail::Recurrent core_;
};

}  // namespace hg::nn
