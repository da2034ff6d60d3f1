// lstm_recurrence, gru_recurrence, rnn_recurrence: the time loop of one layer and direction as
// one op. Forward per step: gh = h_prev @ W_hh^T (gemm_stub) and one fused cell kernel (gates,
// activations, state update, workspace for backward). Backward per step, latest first: one fused
// gradient kernel, then dh_prev = dgh @ W_hh; W_hh's and b_hh's gradients are then two GEMMs and
// a sum over all steps at once. Nothing inside the loop records a node: autograd sees one node
// per call (the backward calls raw kernels, so it is not differentiable again).
//
// Every step works on the first rows of one running state ([N, H], h0's copy), which a packed
// sequence needs: step t updates rows 0..batch_sizes[t]-1, the others keep their state. A full
// batch is the packed case with N rows at every step; it pays one [N, H] copy per step (under 0.1%
// of the step's GEMM at H = 256) for having one code path.
#include "framework/ops/rnn_kernels.h"

#include <algorithm>

#include "framework/op.h"
#include "framework/ops/binary.h"
#include "framework/ops/binary_kernels.h"
#include "framework/ops/copy_kernels.h"
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
const OpDef kLstmProjectedRecurrence{"lstm_projected_recurrence", true, false};

// Rows [begin, begin + count) of a contiguous 2-d tensor, as a contiguous alias.
Tensor recurrence_rows(const Tensor& t, int64_t begin, int64_t count) {
  const int64_t c = t.shape()[1];
  return internal::alias(t, {count, c}, {c, 1}, t.offset() + begin * c);
}
// A contiguous [L, N, C] (or already 2-d) tensor as its [L N, C] rows.
Tensor recurrence_flat(const Tensor& t) {
  return t.dim() == 2 ? t
                      : internal::alias(t, {t.shape()[0] * t.shape()[1], t.shape()[2]}, {t.shape()[2], 1}, t.offset());
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

// The steps' row counts and first rows: batch_sizes as given (packed), or L steps of N.
struct RecurrenceSteps {
  std::vector<int64_t> sizes, offsets;
  bool uniform = true;  // every step has every row: h_prev of step t is the output of the step before
  int64_t batch = 0, rows = 0;
};
RecurrenceSteps recurrence_steps(const char* name, const Tensor& gx, const std::vector<int64_t>& batch_sizes,
                                 int64_t gates_per_unit) {
  RecurrenceSteps r;
  if (batch_sizes.empty()) {
    HG_CHECK(gx.dim() == 3, name, "gates_x must be 3-d [L, N, {}*H], got shape {}", gates_per_unit, gx.shape());
    HG_CHECK(gx.shape()[0] > 0, name, "expected a sequence length above 0, got gates_x of shape {}", gx.shape());
    r.sizes.assign(static_cast<size_t>(gx.shape()[0]), gx.shape()[1]);
  } else {
    HG_CHECK(gx.dim() == 2, name, "packed gates_x must be 2-d [T, {}*H] (T = the sum of batch_sizes), got shape {}",
             gates_per_unit, gx.shape());
    r.sizes = batch_sizes;
    for (size_t t = 0; t < r.sizes.size(); ++t) {
      HG_CHECK(r.sizes[t] > 0, name, "batch_sizes[{}] is {}: every step needs at least one sequence", t, r.sizes[t]);
      HG_CHECK(t == 0 || r.sizes[t] <= r.sizes[t - 1], name,
               "batch_sizes must be non-increasing (sequences sorted by decreasing length), but batch_sizes[{}] = {} > "
               "batch_sizes[{}] = {}",
               t, r.sizes[t], t - 1, r.sizes[t - 1]);
      r.uniform = r.uniform && r.sizes[t] == r.sizes[0];
    }
  }
  r.batch = r.sizes[0];
  for (int64_t s : r.sizes) {
    r.offsets.push_back(r.rows);
    r.rows += s;
  }
  HG_CHECK(batch_sizes.empty() || r.rows == gx.shape()[0], name,
           "packed gates_x has {} rows but batch_sizes add up to {}", gx.shape()[0], r.rows);
  return r;
}

struct RecurrenceSaved {
  SavedTensor h0, c0, w_hh, w_hr, out;
  Tensor c_all, ws, h_raw;  // internal buffers, not visible to the user
};

// The shared body. inputs: gates_x, h0, [c0,] w_hh, b_hh[, w_hr (projected LSTM)].
std::vector<Tensor> run_recurrence(const OpDef& def, RnnCell kind, const TensorList& in_args, bool reverse,
                                   const std::vector<int64_t>& batch_sizes, bool projected = false) {
  OpCall call(def, in_args);
  const char* name = def.name;
  const bool lstm = kind == RnnCell::Lstm;
  const Tensor& gx_in = call.input(0);
  const Tensor& h0_in = call.input(1);
  const Tensor& c0_in = lstm ? call.input(2) : Tensor();
  const Tensor& w_in = call.input(lstm ? 3 : 2);
  const Tensor& b_in = call.input(lstm ? 4 : 3);
  const Tensor& wr_in = projected ? call.input(5) : Tensor();
  HG_CHECK(gx_in.defined(), name, "gates_x is undefined");
  HG_CHECK(is_floating(gx_in.dtype()), name, "expected floating-point tensors, got {}", gx_in.dtype());
  HG_CHECK(h0_in.defined() && h0_in.dim() == 2, name, "h0 must be 2-d [N, H], got {}",
           h0_in.defined() ? fmt::format("shape {}", h0_in.shape()) : std::string("undefined"));
  auto plan = std::make_shared<const RecurrenceSteps>(recurrence_steps(name, gx_in, batch_sizes, rnn_gates(kind)));
  // width: h's (the projection's P when projected), hidden: the cell's (c's) H.
  const int64_t steps = static_cast<int64_t>(plan->sizes.size()), batch = plan->batch, width = h0_in.shape()[1];
  if (projected)
    HG_CHECK(c0_in.defined() && c0_in.dim() == 2, name, "c0 must be 2-d [N, H], got {}",
             c0_in.defined() ? fmt::format("shape {}", c0_in.shape()) : std::string("undefined"));
  const int64_t hidden = projected ? c0_in.shape()[1] : width;
  const int64_t gates = rnn_gates(kind) * hidden;
  HG_CHECK(width > 0 && hidden > 0, name, "expected a hidden size above 0, got h0 of shape {}{}", h0_in.shape(),
           projected ? fmt::format(" and c0 of shape {}", c0_in.shape()) : std::string());
  HG_CHECK(gx_in.shape().back() == gates, name, "gates_x has {} columns, expected {} * hidden size {} = {}",
           gx_in.shape().back(), rnn_gates(kind), hidden, gates);
  check_recurrence_operand(name, "h0", h0_in, gx_in, {batch, width});
  if (lstm) check_recurrence_operand(name, "c0", c0_in, gx_in, {batch, hidden});
  check_recurrence_operand(name, "w_hh", w_in, gx_in, {gates, width});
  if (b_in.defined()) check_recurrence_operand(name, "b_hh", b_in, gx_in, {gates});
  if (projected) check_recurrence_operand(name, "w_hr", wr_in, gx_in, {width, hidden});

  const DeviceType dev = gx_in.device().type;
  const TensorOptions opts = TensorOptions(gx_in.dtype()).device(gx_in.device());
  const Tensor gx = recurrence_flat(internal::contiguous(gx_in));
  const Tensor w_t = recurrence_batch(internal::transposed(w_in));
  const Tensor bias = b_in.defined() ? internal::contiguous(b_in) : Tensor();
  const int64_t rows = plan->rows;
  Tensor out = batch_sizes.empty() ? empty({steps, batch, width}, opts) : empty({rows, width}, opts);
  const Tensor out_rows = recurrence_flat(out);
  Tensor c_all = lstm ? empty({rows, hidden}, opts) : Tensor();
  Tensor ws = rnn_workspace(kind) ? empty({rows, rnn_workspace(kind) * hidden}, opts) : Tensor();
  // Projected: the cell's o tanh(c) of every step, which W_hr^T maps to h.
  Tensor h_raw = projected ? empty({rows, hidden}, opts) : Tensor();
  const Tensor wr_t = projected ? recurrence_batch(internal::transposed(wr_in)) : Tensor();
  // The running state: row r holds sequence r's h (c) after its latest step. A row that is not in
  // a step keeps its value, which is what a packed sequence needs at both of its ends.
  Tensor h_n = empty({batch, width}, opts), c_n = lstm ? empty({batch, hidden}, opts) : Tensor();
  if (batch > 0) {
    copy_stub(dev, h_n, h0_in);
    if (lstm) copy_stub(dev, c_n, c0_in);
    Tensor gh = empty({batch, gates}, opts);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = reverse ? steps - 1 - s : s;
      const int64_t n = plan->sizes[static_cast<size_t>(t)], first = plan->offsets[static_cast<size_t>(t)];
      RnnStep st;
      st.kind = kind, st.gx = recurrence_rows(gx, first, n), st.gh = recurrence_rows(gh, 0, n), st.bias = bias;
      st.h_prev = recurrence_rows(h_n, 0, n);
      if (lstm) st.c_prev = recurrence_rows(c_n, 0, n);
      gemm_stub(dev, recurrence_batch(st.gh), recurrence_batch(st.h_prev), w_t);
      const Tensor h_out = recurrence_rows(out_rows, first, n);
      st.h = projected ? recurrence_rows(h_raw, first, n) : h_out;
      if (lstm) st.c = recurrence_rows(c_all, first, n);
      if (ws.defined()) st.ws = recurrence_rows(ws, first, n);
      rnn_cell_stub(dev, st);
      if (projected) gemm_stub(dev, recurrence_batch(h_out), recurrence_batch(st.h), wr_t);
      copy_stub(dev, st.h_prev, h_out);
      if (lstm) copy_stub(dev, st.c_prev, st.c);
    }
  }

  BackwardFn bw;
  if (call.needs_grad()) {
    auto saved = std::make_shared<RecurrenceSaved>(RecurrenceSaved{
        SavedTensor(h0_in, name), lstm ? SavedTensor(c0_in, name) : SavedTensor(), SavedTensor(w_in, name),
        projected ? SavedTensor(wr_in, name) : SavedTensor(), SavedTensor::output(out, name, 0), c_all, ws, h_raw});
    bw = [saved, plan, gx_shape = gx_in.shape(), kind, lstm, projected, reverse, steps, batch, width, hidden, gates,
          has_bias = b_in.defined()](const TensorList& g) -> TensorList {
      const Tensor h0 = internal::contiguous(saved->h0.get()), w = saved->w_hh.get(), out_saved = saved->out.get();
      const Tensor out = recurrence_flat(out_saved);
      const Tensor c0 = lstm ? internal::contiguous(saved->c0.get()) : Tensor();
      const TensorOptions opts = TensorOptions(out.dtype()).device(out.device());
      const DeviceType dev = out.device().type;
      const int64_t rows = plan->rows;
      const Tensor dy_all = recurrence_flat(g[0].defined() ? internal::dense_as(g[0], out.dtype(), out_saved.shape())
                                                           : zeros(out_saved.shape(), opts));
      // The running gradients of each row's state, as the forward's running state backwards.
      // (Fresh buffers: they are written in place, and the incoming gradients are not ours to change.)
      auto running = [&](const Tensor& grad, int64_t cols) {
        Tensor r = empty({batch, cols}, opts);
        if (grad.defined()) {
          copy_stub(dev, r, grad);
        } else {
          fill_stub(dev, r, 0.0);
        }
        return r;
      };
      Tensor dh = running(g[1], width), dc = lstm ? running(g[2], hidden) : Tensor();
      Tensor dgx = empty({rows, gates}, opts);
      Tensor dgh = kind == RnnCell::Gru ? empty({rows, gates}, opts) : dgx;
      Tensor direct = kind == RnnCell::Gru ? empty({batch, hidden}, opts) : Tensor();
      Tensor dh_prev = empty({batch, width}, opts), dc_prev = lstm ? empty({batch, hidden}, opts) : Tensor();
      // Projected: dy + dh of every step (for W_hr's gradient), its image through W_hr, zeros for
      // the cell's dh (the whole gradient reaching o tanh(c) arrives as its dy).
      Tensor d_total = projected ? empty({rows, width}, opts) : Tensor();
      Tensor d_raw = projected ? empty({batch, hidden}, opts) : Tensor();
      Tensor no_dh = projected ? zeros({batch, hidden}, opts) : Tensor();
      const Tensor wr_b = projected ? recurrence_batch(internal::contiguous(saved->w_hr.get())) : Tensor();
      // Packed with varying sizes: each step's h_prev gathered into one [T, H] buffer for dW_hh.
      Tensor h_prev_all = plan->uniform ? Tensor() : empty({rows, width}, opts);
      Tensor c_prev_buf = lstm && !plan->uniform ? empty({batch, hidden}, opts) : Tensor();
      const Tensor w_b = recurrence_batch(internal::contiguous(w));
      // state_before(t): rows [0, n) of the state step t started from: the step before it in
      // running order where it had those rows, h0's (c0's) rows where it had not.
      auto state_before = [&](int64_t s, const Tensor& all, const Tensor& init, const Tensor& buf) -> Tensor {
        const int64_t t = reverse ? steps - 1 - s : s;
        const int64_t n = plan->sizes[static_cast<size_t>(t)];
        if (s == 0 && !buf.defined()) return recurrence_rows(init, 0, n);
        if (s == 0) {
          copy_stub(dev, recurrence_rows(buf, 0, n), recurrence_rows(init, 0, n));
          return recurrence_rows(buf, 0, n);
        }
        const int64_t tp = reverse ? t + 1 : t - 1;
        const int64_t np = plan->sizes[static_cast<size_t>(tp)], fp = plan->offsets[static_cast<size_t>(tp)];
        if (np >= n && !buf.defined()) return recurrence_rows(all, fp, n);
        const Tensor dst = recurrence_rows(buf, 0, n);
        const int64_t have = std::min(np, n);
        copy_stub(dev, recurrence_rows(dst, 0, have), recurrence_rows(all, fp, have));
        if (have < n) copy_stub(dev, recurrence_rows(dst, have, n - have), recurrence_rows(init, have, n - have));
        return dst;
      };
      if (batch > 0) {
        for (int64_t s = steps - 1; s >= 0; --s) {
          const int64_t t = reverse ? steps - 1 - s : s;
          const int64_t n = plan->sizes[static_cast<size_t>(t)], first = plan->offsets[static_cast<size_t>(t)];
          RnnStepGrad sg;
          sg.kind = kind, sg.dy = recurrence_rows(dy_all, first, n), sg.dh = recurrence_rows(dh, 0, n);
          const Tensor dh_rows = sg.dh;
          if (projected) {
            const Tensor total = recurrence_rows(d_total, first, n);
            binary_stub(dev, BinaryOp::Add, total, sg.dy, sg.dh, 1.0);
            sg.dy = recurrence_rows(d_raw, 0, n);
            gemm_stub(dev, recurrence_batch(sg.dy), recurrence_batch(total), wr_b);
            sg.dh = recurrence_rows(no_dh, 0, n);
          }
          if (lstm) sg.dc = recurrence_rows(dc, 0, n);
          if (saved->ws.defined()) sg.ws = recurrence_rows(saved->ws, first, n);
          sg.h_prev = state_before(s, out, h0, h_prev_all.defined() ? recurrence_rows(h_prev_all, first, n) : Tensor());
          sg.h = projected ? recurrence_rows(saved->h_raw, first, n) : recurrence_rows(out, first, n);
          if (lstm) {
            sg.c_prev = state_before(s, saved->c_all, c0, c_prev_buf);
            sg.c = recurrence_rows(saved->c_all, first, n);
            sg.dc_prev = recurrence_rows(dc_prev, 0, n);
          }
          sg.dgx = recurrence_rows(dgx, first, n);
          sg.dgh = recurrence_rows(dgh, first, n);
          if (direct.defined()) sg.dh_direct = recurrence_rows(direct, 0, n);
          rnn_cell_backward_stub(dev, sg);
          const Tensor dhp = recurrence_rows(dh_prev, 0, n);
          gemm_stub(dev, recurrence_batch(dhp), recurrence_batch(sg.dgh), w_b);
          if (direct.defined()) binary_stub(dev, BinaryOp::Add, dhp, dhp, sg.dh_direct, 1.0);
          copy_stub(dev, dh_rows, dhp);
          if (lstm) copy_stub(dev, sg.dc, sg.dc_prev);
        }
      }
      // dW_hh = sum_t dgh_t^T h_prev_t. Every row present at every step: the steps whose h_prev is
      // an output row in one GEMM, h0's step in another; packed: over the gathered h_prev rows.
      Tensor dw;
      if (!plan->uniform) {
        dw = mm(dgh.t(), h_prev_all);
      } else {
        const int64_t first = reverse ? (steps - 1) * batch : 0;
        dw = mm(recurrence_rows(dgh, first, batch).t(), h0);
        if (steps > 1) {
          const int64_t later = (steps - 1) * batch;
          const Tensor dg = reverse ? recurrence_rows(dgh, 0, later) : recurrence_rows(dgh, batch, later);
          const Tensor prev = reverse ? recurrence_rows(out, batch, later) : recurrence_rows(out, 0, later);
          dw = dw + mm(dg.t(), prev);
        }
      }
      Tensor db = has_bias ? sum(dgh, {0}) : Tensor();
      TensorList grads{internal::alias_contiguous(dgx, gx_shape), dh};
      if (lstm) grads.push_back(dc);
      grads.push_back(dw);
      grads.push_back(db);
      if (projected) grads.push_back(mm(d_total.t(), saved->h_raw));  // W_hr's: sum_t (dy + dh)_t^T (o tanh c)_t
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
                                                   const Tensor& w_hh, const Tensor& b_hh, bool reverse,
                                                   const std::vector<int64_t>& batch_sizes) {
  auto r = run_recurrence(kLstmRecurrence, RnnCell::Lstm, {gates_x, h0, c0, w_hh, b_hh}, reverse, batch_sizes);
  return {r[0], r[1], r[2]};
}

std::tuple<Tensor, Tensor, Tensor> lstm_projected_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& c0,
                                                             const Tensor& w_hh, const Tensor& b_hh, const Tensor& w_hr,
                                                             bool reverse, const std::vector<int64_t>& batch_sizes) {
  auto r = run_recurrence(kLstmProjectedRecurrence, RnnCell::Lstm, {gates_x, h0, c0, w_hh, b_hh, w_hr}, reverse,
                          batch_sizes, true);
  return {r[0], r[1], r[2]};
}

std::tuple<Tensor, Tensor> gru_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& w_hh,
                                          const Tensor& b_hh, bool reverse, const std::vector<int64_t>& batch_sizes) {
  auto r = run_recurrence(kGruRecurrence, RnnCell::Gru, {gates_x, h0, w_hh, b_hh}, reverse, batch_sizes);
  return {r[0], r[1]};
}

std::tuple<Tensor, Tensor> rnn_recurrence(const Tensor& gates_x, const Tensor& h0, const Tensor& w_hh,
                                          const Tensor& b_hh, bool relu, bool reverse,
                                          const std::vector<int64_t>& batch_sizes) {
  auto r = run_recurrence(kRnnRecurrence, relu ? RnnCell::Relu : RnnCell::Tanh, {gates_x, h0, w_hh, b_hh}, reverse,
                          batch_sizes);
  return {r[0], r[1]};
}

}  // namespace hg
