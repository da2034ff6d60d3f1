// lstm_recurrence, gru_recurrence, rnn_recurrence: the time loop of one layer and direction as
// one op. Forward per step: gh = h_prev @ W_hh^T (gemm_stub) and one fused cell kernel (gates,
// activations, state update, workspace for backward). Backward per step, latest first: one fused
// gradient kernel, then dh_prev = dgh @ W_hh; W_hh's and b_hh's gradients are then two GEMMs and
// a sum over all steps at once. Nothing inside the loop records a node: autograd sees one node
// per call (the backward calls raw kernels, so it is not differentiable again).
#include "framework/ops/rnn_kernels.h"

#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/creation.h"
#include "framework/ops/internal.h"
#include "framework/ops/matmul.h"
#include "framework/ops/matmul_kernels.h"
#include "framework/ops/reduce.h"

namespace hg {

HG_DEFINE_STUB(rnn_cell_stub, RnnCellFn);
HG_DEFINE_STUB(rnn_cell_backward_stub, RnnCellBackwardFn);

namespace {
const OpDef kLstmRecurrence{"lstm_recurrence", true, false};
const OpDef kGruRecurrence{"gru_recurrence", true, false};
const OpDef kRnnRecurrence{"rnn_recurrence", true, false};

// Row t of a contiguous [L, N, C] tensor, as a contiguous [N, C] alias.
Tensor recurrence_step(const Tensor& t, int64_t s) {
  const int64_t n = t.shape()[1], c = t.shape()[2];
  return internal::alias(t, {n, c}, {c, 1}, t.offset() + s * n * c);
}
// Rows [begin, end) of a contiguous [L, N, C] tensor as a [(end - begin) N, C] alias.
Tensor recurrence_rows(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t n = t.shape()[1], c = t.shape()[2];
  return internal::alias(t, {(end - begin) * n, c}, {c, 1}, t.offset() + begin * n * c);
}
// A 2-d tensor as the [1, rows, cols] batch gemm_stub takes.
Tensor recurrence_batch(const Tensor& t) {
  return internal::alias(t, {1, t.shape()[0], t.shape()[1]}, {0, t.strides()[0], t.strides()[1]}, t.offset());
}

void check_recurrence_operand(const char* op, const char* what, const Tensor& t, const Tensor& gx, const Shape& shape) {
  HG_CHECK(t.defined(), op, "{} is undefined", what);
  HG_CHECK(t.device() == gx.device(), op, "{} is on {} but gates_x is on {}", what, t.device(), gx.device());
  HG_CHECK(t.dtype() == gx.dtype(), op, "{} has dtype {} but gates_x has {}; convert one, or run inside autocast", what,
           t.dtype(), gx.dtype());
  HG_CHECK(t.shape() == shape, op, "{} must have shape {}, got {}", what, shape, t.shape());
}

struct RecurrenceSaved {
  SavedTensor h0, c0, w_hh, out;
  Tensor c_all, ws;  // internal buffers, not visible to the user
};

// The shared body. inputs: gates_x, h0, [c0,] w_hh, b_hh.
std::vector<Tensor> run_recurrence(const OpDef& def, RnnCell kind, const TensorList& in_args, bool reverse) {
  OpCall call(def, in_args);
  const char* name = def.name;
  const bool lstm = kind == RnnCell::Lstm;
  const Tensor& gx_in = call.input(0);
  const Tensor& h0_in = call.input(1);
  const Tensor& c0_in = lstm ? call.input(2) : Tensor();
  const Tensor& w_in = call.input(lstm ? 3 : 2);
  const Tensor& b_in = call.input(lstm ? 4 : 3);
  HG_CHECK(gx_in.defined(), name, "gates_x is undefined");
  HG_CHECK(is_floating(gx_in.dtype()), name, "expected floating-point tensors, got {}", gx_in.dtype());
  HG_CHECK(gx_in.dim() == 3, name, "gates_x must be 3-d [L, N, {}*H], got shape {}", rnn_gates(kind), gx_in.shape());
  HG_CHECK(h0_in.defined() && h0_in.dim() == 2, name, "h0 must be 2-d [N, H], got {}",
           h0_in.defined() ? fmt::format("shape {}", h0_in.shape()) : std::string("undefined"));
  const int64_t steps = gx_in.shape()[0], batch = gx_in.shape()[1], hidden = h0_in.shape()[1];
  const int64_t gates = rnn_gates(kind) * hidden;
  HG_CHECK(steps > 0, name, "expected a sequence length above 0, got gates_x of shape {}", gx_in.shape());
  HG_CHECK(hidden > 0, name, "expected a hidden size above 0, got h0 of shape {}", h0_in.shape());
  HG_CHECK(gx_in.shape()[2] == gates, name, "gates_x has {} columns, expected {} * hidden size {} = {}",
           gx_in.shape()[2], rnn_gates(kind), hidden, gates);
  check_recurrence_operand(name, "h0", h0_in, gx_in, {batch, hidden});
  if (lstm) check_recurrence_operand(name, "c0", c0_in, gx_in, {batch, hidden});
  check_recurrence_operand(name, "w_hh", w_in, gx_in, {gates, hidden});
  if (b_in.defined()) check_recurrence_operand(name, "b_hh", b_in, gx_in, {gates});

  const DeviceType dev = gx_in.device().type;
  const TensorOptions opts = TensorOptions(gx_in.dtype()).device(gx_in.device());
  const Tensor gx = internal::contiguous(gx_in), h0 = internal::contiguous(h0_in);
  const Tensor c0 = lstm ? internal::contiguous(c0_in) : Tensor();
  const Tensor w_t = recurrence_batch(internal::transposed(w_in));
  const Tensor bias = b_in.defined() ? internal::contiguous(b_in) : Tensor();
  Tensor out = empty({steps, batch, hidden}, opts);
  Tensor c_all = lstm ? empty({steps, batch, hidden}, opts) : Tensor();
  Tensor ws = rnn_workspace(kind) ? empty({steps, batch, rnn_workspace(kind) * hidden}, opts) : Tensor();
  if (batch > 0) {
    Tensor gh = empty({batch, gates}, opts);
    Tensor h_prev = h0, c_prev = c0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      gemm_stub(dev, recurrence_batch(gh), recurrence_batch(h_prev), w_t);
      RnnStep st;
      st.kind = kind, st.gx = recurrence_step(gx, t), st.gh = gh, st.bias = bias, st.h_prev = h_prev,
      st.c_prev = c_prev;
      st.h = recurrence_step(out, t);
      if (lstm) st.c = recurrence_step(c_all, t);
      if (ws.defined()) st.ws = recurrence_step(ws, t);
      rnn_cell_stub(dev, st);
      h_prev = st.h;
      c_prev = st.c;
    }
  }
  const int64_t last = reverse ? 0 : steps - 1;
  Tensor h_n = internal::converted(recurrence_step(out, last), out.dtype());
  Tensor c_n = lstm ? internal::converted(recurrence_step(c_all, last), out.dtype()) : Tensor();

  BackwardFn bw;
  if (call.needs_grad()) {
    auto saved = std::make_shared<RecurrenceSaved>(
        RecurrenceSaved{SavedTensor(h0_in, name), lstm ? SavedTensor(c0_in, name) : SavedTensor(),
                        SavedTensor(w_in, name), SavedTensor::output(out, name, 0), c_all, ws});
    bw = [saved, kind, lstm, reverse, steps, batch, hidden, gates,
          has_bias = b_in.defined()](const TensorList& g) -> TensorList {
      const Tensor h0 = internal::contiguous(saved->h0.get()), w = saved->w_hh.get(), out = saved->out.get();
      const Tensor c0 = lstm ? internal::contiguous(saved->c0.get()) : Tensor();
      const TensorOptions opts = TensorOptions(out.dtype()).device(out.device());
      const DeviceType dev = out.device().type;
      const Tensor dy_all =
          g[0].defined() ? internal::dense_as(g[0], out.dtype(), out.shape()) : zeros(out.shape(), opts);
      Tensor dh = g[1].defined() ? internal::converted(g[1], out.dtype()) : zeros({batch, hidden}, opts);
      Tensor dc =
          lstm ? (g[2].defined() ? internal::converted(g[2], out.dtype()) : zeros({batch, hidden}, opts)) : Tensor();
      Tensor dgx = empty({steps, batch, gates}, opts);
      Tensor dgh = kind == RnnCell::Gru ? empty({steps, batch, gates}, opts) : dgx;
      Tensor direct = kind == RnnCell::Gru ? empty({batch, hidden}, opts) : Tensor();
      const Tensor w_b = recurrence_batch(internal::contiguous(w));
      if (batch > 0) {
        for (int64_t s = steps - 1; s >= 0; --s) {
          const int64_t t = reverse ? steps - 1 - s : s;
          const int64_t tp = reverse ? t + 1 : t - 1;  // the step that ran before t
          RnnStepGrad sg;
          sg.kind = kind, sg.dy = recurrence_step(dy_all, t), sg.dh = dh, sg.dc = dc;
          if (saved->ws.defined()) sg.ws = recurrence_step(saved->ws, t);
          sg.h_prev = s == 0 ? h0 : recurrence_step(out, tp);
          sg.h = recurrence_step(out, t);
          if (lstm) {
            sg.c_prev = s == 0 ? c0 : recurrence_step(saved->c_all, tp);
            sg.c = recurrence_step(saved->c_all, t);
            sg.dc_prev = empty({batch, hidden}, opts);
          }
          sg.dgx = recurrence_step(dgx, t);
          sg.dgh = recurrence_step(dgh, t);
          sg.dh_direct = direct;
          rnn_cell_backward_stub(dev, sg);
          Tensor dh_prev = empty({batch, hidden}, opts);
          gemm_stub(dev, recurrence_batch(dh_prev), recurrence_batch(sg.dgh), w_b);
          if (direct.defined()) binary_stub(dev, BinaryOp::Add, dh_prev, dh_prev, direct, 1.0);
          dh = dh_prev;
          dc = sg.dc_prev;
        }
      }
      // dW_hh = sum_t dgh_t^T h_prev_t: the steps whose h_prev is an output row in one GEMM, h0's step in another.
      const int64_t first = reverse ? steps - 1 : 0;
      Tensor dw = mm(recurrence_step(dgh, first).t(), h0);
      if (steps > 1) {
        const Tensor rows = reverse ? recurrence_rows(dgh, 0, steps - 1) : recurrence_rows(dgh, 1, steps);
        const Tensor prev = reverse ? recurrence_rows(out, 1, steps) : recurrence_rows(out, 0, steps - 1);
        dw = dw + mm(rows.t(), prev);
      }
      Tensor db = has_bias ? sum(recurrence_rows(dgh, 0, steps), {0}) : Tensor();
      TensorList grads{dgx, dh};
      if (lstm) grads.push_back(dc);
      grads.push_back(dw);
      grads.push_back(db);
      return grads;
    };
  }
  std::vector<Tensor*> outs{&out, &h_n};
  if (lstm) outs.push_back(&c_n);
  call.finish(outs, std::move(bw));
  if (lstm) return {out, h_n, c_n};
  return {out, h_n};
}
}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& c0,
                                                   const Tensor& w_hh, const Tensor& b_hh, bool reverse) {
  auto r = run_recurrence(kLstmRecurrence, RnnCell::Lstm, {gates_x, h0, c0, w_hh, b_hh}, reverse);
  return {r[0], r[1], r[2]};
}

std::tuple<Tensor, Tensor> gru_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& w_hh,
                                          const Tensor& b_hh, bool reverse) {
  auto r = run_recurrence(kGruRecurrence, RnnCell::Gru, {gates_x, h0, w_hh, b_hh}, reverse);
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor> rnn_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& w_hh,
                                          const Tensor& b_hh, bool relu, bool reverse) {
  auto r = run_recurrence(kRnnRecurrence, relu ? RnnCell::Relu : RnnCell::Tanh, {gates_x, h0, w_hh, b_hh}, reverse);
  return {r[0], r[1]};
}

}  // namespace hg
