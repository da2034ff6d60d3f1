// The recurrences behind nn::LSTM, nn::GRU and nn::RNN: one op per layer and direction that runs
// every time step (h @ W_hh^T, then one fused gate kernel) and, in backward, every step back
// (one fused gate-gradient kernel, then dgates @ W_hh), so autograd records one node per layer
// and direction, not a handful per step. The input projection x @ W_ih^T + b_ih of all steps is
// one linear() before it (gates_x below).
#pragma once

#include <tuple>
#include <vector>

#include "framework/tensor.h"

namespace hg {

// gates_x [L, N, G*H]: x_t W_ih^T + b_ih for every step t (G = 4 for LSTM, 3 for GRU, 1 for RNN),
// h0 (and c0) [N, H], w_hh [G*H, H] and b_hh [G*H] (or undefined) as PyTorch's weight_hh_l*/
// bias_hh_l* (gate order i, f, g, o for LSTM; r, z, n for GRU). reverse runs t = L-1 .. 0 (the
// backward direction of a bidirectional layer). Returns output [L, N, H] (h_t of every step, in
// time order) and the last step's h (and c). All inputs of one floating dtype and device.
//
// Packed sequences (batch_sizes not empty, as PyTorch's PackedSequence): gates_x is [T, G*H], the
// rows of step t following those of steps 0..t-1, batch_sizes[t] of them (non-increasing, the
// first equal to N: sequences sorted by decreasing length). Step t updates rows 0..batch_sizes[t]-1
// only; a row past its sequence's end keeps its state, so the returned h (and c) hold each
// sequence's state after its own last step (reverse: after step 0, each sequence starting at its
// own last step from h0). output is [T, H], packed the same way.

// LSTM: i, f, o = sigmoid, g = tanh of gates_x + h W_hh^T + b_hh; c' = f c + i g; h' = o tanh(c').
std::tuple<Tensor, Tensor, Tensor> lstm_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& c0,
                                                   const Tensor& w_hh, const Tensor& b_hh, bool reverse = false,
                                                   const std::vector<int64_t>& batch_sizes = {});
// LSTM with a projection (PyTorch's proj_size): h' = (o tanh(c')) W_hr^T, so h0, h and the output
// have P columns: h0 [N, P], c0 [N, H], w_hh [4H, P], w_hr [P, H].
std::tuple<Tensor, Tensor, Tensor> lstm_projected_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& c0,
                                                             const Tensor& w_hh, const Tensor& b_hh, const Tensor& w_hr,
                                                             bool reverse = false,
                                                             const std::vector<int64_t>& batch_sizes = {});
// GRU: r, z = sigmoid(x + h parts), n = tanh(x_n + r (h W_hn^T + b_hn)), h' = (1 - z) n + z h.
std::tuple<Tensor, Tensor> gru_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& w_hh,
                                          const Tensor& b_hh, bool reverse = false,
                                          const std::vector<int64_t>& batch_sizes = {});
// Elman RNN: h' = tanh (or relu) of gates_x + h W_hh^T + b_hh.
std::tuple<Tensor, Tensor> rnn_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& w_hh,
                                          const Tensor& b_hh, bool relu = false, bool reverse = false,
                                          const std::vector<int64_t>& batch_sizes = {});

}  // namespace hg
