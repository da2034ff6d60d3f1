// Kernel plumbing behind rnn.h: one step of a recurrent cell and its gradient, for kernels/cpu
// and kernels/cuda. Internal: not installed.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/rnn.h"

namespace hg {

enum class RnnCell { Lstm, Gru, Tanh, Relu };

// Gates per hidden unit, and the per-step workspace (saved for backward) in units of H.
constexpr int64_t rnn_gates(RnnCell kind) { return kind == RnnCell::Lstm ? 4 : kind == RnnCell::Gru ? 3 : 1; }
constexpr int64_t rnn_workspace(RnnCell kind) { return kind == RnnCell::Lstm || kind == RnnCell::Gru ? 4 : 0; }

// One forward step, every tensor contiguous and of one dtype: gx, gh [N, G*H] (gh = h_prev W_hh^T,
// without its bias), bias [G*H] or undefined, h_prev [N, H] (GRU), c_prev [N, H] (LSTM). Writes
// h [N, H], c [N, H] (LSTM), and ws [N, 4H]: LSTM the activated gates i, f, g, o; GRU r, z, n
// and gh_n + b_hn. The maths in float32 (float64 for float64), rounded once on store.
struct RnnStep {
  RnnCell kind = RnnCell::Lstm;
  Tensor gx, gh, bias, h_prev, c_prev;
  Tensor h, c, ws;
};
using RnnCellFn = void (*)(const RnnStep& step);
HG_DECLARE_STUB(rnn_cell_stub, RnnCellFn);

// One backward step: dy (the output's gradient at this step) + dh (the next step's) reach h; dc
// (LSTM) reaches c. Reads the forward's ws, h_prev (GRU), c_prev and c (LSTM), h (RNN). Writes
// dgx [N, G*H] (the gradient of the pre-activations from the input side), dgh [N, G*H] (GRU only:
// from the hidden side, which differs in n), dh_direct [N, H] (GRU: z dh, the part of h_prev's
// gradient that skips W_hh) and dc_prev [N, H] (LSTM). For LSTM and RNN dgh is dgx.
struct RnnStepGrad {
  RnnCell kind = RnnCell::Lstm;
  Tensor dy, dh, dc;
  Tensor ws, h_prev, c_prev, h, c;
  Tensor dgx, dgh, dh_direct, dc_prev;
};
using RnnCellBackwardFn = void (*)(const RnnStepGrad& step);
HG_DECLARE_STUB(rnn_cell_backward_stub, RnnCellBackwardFn);

}  // namespace hg
