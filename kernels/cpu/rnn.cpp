// CPU recurrent cells (rnn_kernels.h): one step of LSTM, GRU or Elman RNN and its gradient, a
// batch row at a time. Each row is read into float32 (float64) buffers, the sigmoids and tanhs
// run through SLEEF's vector functions (map_unary) where the build has them, and the results are
// rounded once on store. Rows run in parallel; a row is G*H values, so small batches still split.
#include <vector>

#include "framework/ops/rnn_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/simd/vec_math.h"

namespace hg::cpu {
namespace {

template <class F, class A>
void rnn_map(const F& f, A* x, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    map_unary(f, x, x, n);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = f(x[i]);
  }
}

template <class T>
const T* rnn_ptr(const Tensor& t, int64_t row, int64_t cols) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) + row * cols : nullptr;
}
template <class T>
T* rnn_out(const Tensor& t, int64_t row, int64_t cols) {
  return t.defined() ? static_cast<T*>(t.raw_data()) + row * cols : nullptr;
}

// Rows per parallel chunk: about 16k values of work each.
int64_t rnn_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

template <class T>
void cell_forward(const RnnStep& s) {
  using A = acc_t<T>;
  const int64_t batch = s.gx.shape()[0], gates = s.gx.shape()[1];
  const int64_t hidden = gates / rnn_gates(s.kind);
  std::vector<A> bias(static_cast<size_t>(gates), A(0));
  if (s.bias.defined()) load_run(static_cast<const T*>(s.bias.raw_data()), bias.data(), gates);
  parallel_for(batch, rnn_grain(gates), [&](int64_t begin, int64_t end) {
    std::vector<A> a(static_cast<size_t>(gates)), b(static_cast<size_t>(gates)), p(static_cast<size_t>(4 * hidden));
    A* pa = a.data();
    A* pb = b.data();
    A* pp = p.data();
    const A* pbias = bias.data();
    for (int64_t r = begin; r < end; ++r) {
      load_run(rnn_ptr<T>(s.gx, r, gates), pa, gates);
      load_run(rnn_ptr<T>(s.gh, r, gates), pb, gates);
      const int64_t h = hidden;
      switch (s.kind) {
        case RnnCell::Lstm: {
          for (int64_t j = 0; j < gates; ++j) pa[j] += pb[j] + pbias[j];
          rnn_map(scalar::Sigmoid{}, pa, 2 * h);
          rnn_map(scalar::Tanh{}, pa + 2 * h, h);
          rnn_map(scalar::Sigmoid{}, pa + 3 * h, h);
          load_run(rnn_ptr<T>(s.c_prev, r, h), pp, h);
          for (int64_t j = 0; j < h; ++j) pp[j] = pa[h + j] * pp[j] + pa[j] * pa[2 * h + j];  // c = f c + i g
          store_run(pp, rnn_out<T>(s.c, r, h), h);
          rnn_map(scalar::Tanh{}, pp, h);
          for (int64_t j = 0; j < h; ++j) pp[j] *= pa[3 * h + j];  // h = o tanh(c)
          store_run(pp, rnn_out<T>(s.h, r, h), h);
          store_run(pa, rnn_out<T>(s.ws, r, 4 * h), 4 * h);
          break;
        }
        case RnnCell::Gru: {
          for (int64_t j = 0; j < 2 * h; ++j) pa[j] += pb[j] + pbias[j];
          rnn_map(scalar::Sigmoid{}, pa, 2 * h);
          A* ghn = pb + 2 * h;
          for (int64_t j = 0; j < h; ++j) {
            ghn[j] += pbias[2 * h + j];
            pa[2 * h + j] += pa[j] * ghn[j];  // x_n + r (W_hn h + b_hn)
          }
          rnn_map(scalar::Tanh{}, pa + 2 * h, h);
          load_run(rnn_ptr<T>(s.h_prev, r, h), pp, h);
          for (int64_t j = 0; j < h; ++j) {
            const A z = pa[h + j], n = pa[2 * h + j];
            pp[j] = (A(1) - z) * n + z * pp[j];
          }
          store_run(pp, rnn_out<T>(s.h, r, h), h);
          store_run(pa, rnn_out<T>(s.ws, r, 4 * h), 3 * h);
          store_run(ghn, rnn_out<T>(s.ws, r, 4 * h) + 3 * h, h);
          break;
        }
        case RnnCell::Tanh:
        case RnnCell::Relu: {
          for (int64_t j = 0; j < h; ++j) pa[j] += pb[j] + pbias[j];
          if (s.kind == RnnCell::Tanh) {
            rnn_map(scalar::Tanh{}, pa, h);
          } else {
            for (int64_t j = 0; j < h; ++j) pa[j] = pa[j] > A(0) ? pa[j] : A(0);
          }
          store_run(pa, rnn_out<T>(s.h, r, h), h);
          break;
        }
      }
    }
  });
}

template <class T>
void cell_backward(const RnnStepGrad& s) {
  using A = acc_t<T>;
  const int64_t batch = s.dgx.shape()[0], gates = s.dgx.shape()[1];
  const int64_t h = gates / rnn_gates(s.kind);
  parallel_for(batch, rnn_grain(gates), [&](int64_t begin, int64_t end) {
    // dhs: the gradient reaching h; w: the workspace row; x, y: h_prev / c_prev / c / h rows; d: outputs.
    std::vector<A> dhs(static_cast<size_t>(h)), tmp(static_cast<size_t>(h)), w(static_cast<size_t>(4 * h)),
        x(static_cast<size_t>(h)), y(static_cast<size_t>(h)), d(static_cast<size_t>(gates)),
        e(static_cast<size_t>(gates));
    A *pdh = dhs.data(), *pt = tmp.data(), *pw = w.data(), *px = x.data(), *py = y.data(), *pd = d.data(),
      *pe = e.data();
    for (int64_t r = begin; r < end; ++r) {
      load_run(rnn_ptr<T>(s.dy, r, h), pdh, h);
      load_run(rnn_ptr<T>(s.dh, r, h), pt, h);
      for (int64_t j = 0; j < h; ++j) pdh[j] += pt[j];
      switch (s.kind) {
        case RnnCell::Lstm: {
          load_run(rnn_ptr<T>(s.ws, r, 4 * h), pw, 4 * h);
          load_run(rnn_ptr<T>(s.c_prev, r, h), px, h);
          load_run(rnn_ptr<T>(s.c, r, h), py, h);
          load_run(rnn_ptr<T>(s.dc, r, h), pt, h);
          A* tc = pe;  // tanh(c), recomputed
          for (int64_t j = 0; j < h; ++j) tc[j] = py[j];
          rnn_map(scalar::Tanh{}, tc, h);
          for (int64_t j = 0; j < h; ++j) {
            const A i = pw[j], f = pw[h + j], g = pw[2 * h + j], o = pw[3 * h + j], t = tc[j];
            const A dcs = pt[j] + pdh[j] * o * (A(1) - t * t);
            pd[j] = dcs * g * i * (A(1) - i);
            pd[h + j] = dcs * px[j] * f * (A(1) - f);
            pd[2 * h + j] = dcs * i * (A(1) - g * g);
            pd[3 * h + j] = pdh[j] * t * o * (A(1) - o);
            pt[j] = dcs * f;
          }
          store_run(pt, rnn_out<T>(s.dc_prev, r, h), h);
          break;
        }
        case RnnCell::Gru: {
          load_run(rnn_ptr<T>(s.ws, r, 4 * h), pw, 4 * h);
          load_run(rnn_ptr<T>(s.h_prev, r, h), px, h);
          for (int64_t j = 0; j < h; ++j) {
            const A rr = pw[j], z = pw[h + j], n = pw[2 * h + j], ghn = pw[3 * h + j];
            const A dnp = pdh[j] * (A(1) - z) * (A(1) - n * n);
            const A drp = dnp * ghn * rr * (A(1) - rr);
            const A dzp = pdh[j] * (px[j] - n) * z * (A(1) - z);
            pd[j] = pe[j] = drp;
            pd[h + j] = pe[h + j] = dzp;
            pd[2 * h + j] = dnp;
            pe[2 * h + j] = dnp * rr;
            pt[j] = pdh[j] * z;
          }
          store_run(pe, rnn_out<T>(s.dgh, r, gates), gates);
          store_run(pt, rnn_out<T>(s.dh_direct, r, h), h);
          break;
        }
        case RnnCell::Tanh:
        case RnnCell::Relu: {
          load_run(rnn_ptr<T>(s.h, r, h), py, h);
          for (int64_t j = 0; j < h; ++j)
            pd[j] = s.kind == RnnCell::Tanh ? pdh[j] * (A(1) - py[j] * py[j]) : (py[j] > A(0) ? pdh[j] : A(0));
          break;
        }
      }
      store_run(pd, rnn_out<T>(s.dgx, r, gates), gates);
    }
  });
}

void rnn_cell_cpu(const RnnStep& step) {
  dispatch_floating(step.gx.dtype(), "rnn_cell", [&]<class T>(TypeTag<T>) { cell_forward<T>(step); });
}
void rnn_cell_backward_cpu(const RnnStepGrad& step) {
  dispatch_floating(step.dgx.dtype(), "rnn_cell_backward", [&]<class T>(TypeTag<T>) { cell_backward<T>(step); });
}

}  // namespace

HG_REGISTER_KERNEL(rnn_cell_stub, kCPU, rnn_cell_cpu);
HG_REGISTER_KERNEL(rnn_cell_backward_stub, kCPU, rnn_cell_backward_cpu);

}  // namespace hg::cpu
