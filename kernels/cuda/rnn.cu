// CUDA recurrent cells (rnn_kernels.h): one thread per (batch row, hidden unit) computes all of
// that unit's gates, its state update and the workspace values (forward), or their gradients
// (backward), in float32 (float64 for float64), rounded once on store, as the CPU kernel.
#include "framework/dispatch.h"
#include "framework/ops/rnn_kernels.h"
#include "kernels/common/scalar_ops.h"
#include "kernels/cuda/loops.cuh"

namespace hg::cuda {
namespace {

template <class T>
struct CellPtrs {
  const T *gx, *gh, *bias, *h_prev, *c_prev;
  T *h, *c, *ws;
};

template <class T>
__device__ acc_t<T> ld(const T* p, int64_t i) {
  return p ? to_acc(p[i]) : acc_t<T>(0);
}

template <class T>
__global__ void rnn_cell_kernel(CellPtrs<T> p, RnnCell kind, int64_t batch, int64_t h) {
  using A = acc_t<T>;
  const scalar::Sigmoid sig;
  const scalar::Tanh tanh_f;
  const int64_t g = rnn_gates(kind) * h;
  HG_KERNEL_LOOP(idx, batch * h) {
    const int64_t r = idx / h, j = idx % h;
    const T* gx = p.gx + r * g;
    const T* gh = p.gh + r * g;
    auto pre = [&](int64_t k) { return to_acc(gx[k * h + j]) + to_acc(gh[k * h + j]) + ld(p.bias, k * h + j); };
    if (kind == RnnCell::Lstm) {
      const A i = sig(pre(0)), f = sig(pre(1)), gg = tanh_f(pre(2)), o = sig(pre(3));
      const A c = f * to_acc(p.c_prev[idx]) + i * gg;
      p.c[idx] = from_acc<T>(c);
      p.h[idx] = from_acc<T>(o * tanh_f(c));
      T* ws = p.ws + r * 4 * h;
      ws[j] = from_acc<T>(i), ws[h + j] = from_acc<T>(f), ws[2 * h + j] = from_acc<T>(gg),
      ws[3 * h + j] = from_acc<T>(o);
    } else if (kind == RnnCell::Gru) {
      const A rr = sig(pre(0)), z = sig(pre(1));
      const A ghn = to_acc(gh[2 * h + j]) + ld(p.bias, 2 * h + j);
      const A n = tanh_f(to_acc(gx[2 * h + j]) + rr * ghn);
      p.h[idx] = from_acc<T>((A(1) - z) * n + z * to_acc(p.h_prev[idx]));
      T* ws = p.ws + r * 4 * h;
      ws[j] = from_acc<T>(rr), ws[h + j] = from_acc<T>(z), ws[2 * h + j] = from_acc<T>(n),
      ws[3 * h + j] = from_acc<T>(ghn);
    } else {
      const A v = pre(0);
      p.h[idx] = from_acc<T>(kind == RnnCell::Tanh ? tanh_f(v) : (v > A(0) ? v : A(0)));
    }
  }
}

template <class T>
struct GradPtrs {
  const T *dy, *dh, *dc, *ws, *h_prev, *c_prev, *h, *c;
  T *dgx, *dgh, *dh_direct, *dc_prev;
};

template <class T>
__global__ void rnn_cell_backward_kernel(GradPtrs<T> p, RnnCell kind, int64_t batch, int64_t h) {
  using A = acc_t<T>;
  const scalar::Tanh tanh_f;
  const int64_t g = rnn_gates(kind) * h;
  HG_KERNEL_LOOP(idx, batch * h) {
    const int64_t r = idx / h, j = idx % h;
    const A dhs = to_acc(p.dy[idx]) + to_acc(p.dh[idx]);
    T* dgx = p.dgx + r * g;
    if (kind == RnnCell::Lstm) {
      const T* ws = p.ws + r * 4 * h;
      const A i = to_acc(ws[j]), f = to_acc(ws[h + j]), gg = to_acc(ws[2 * h + j]), o = to_acc(ws[3 * h + j]);
      const A t = tanh_f(to_acc(p.c[idx]));
      const A dcs = to_acc(p.dc[idx]) + dhs * o * (A(1) - t * t);
      dgx[j] = from_acc<T>(dcs * gg * i * (A(1) - i));
      dgx[h + j] = from_acc<T>(dcs * to_acc(p.c_prev[idx]) * f * (A(1) - f));
      dgx[2 * h + j] = from_acc<T>(dcs * i * (A(1) - gg * gg));
      dgx[3 * h + j] = from_acc<T>(dhs * t * o * (A(1) - o));
      p.dc_prev[idx] = from_acc<T>(dcs * f);
    } else if (kind == RnnCell::Gru) {
      const T* ws = p.ws + r * 4 * h;
      const A rr = to_acc(ws[j]), z = to_acc(ws[h + j]), n = to_acc(ws[2 * h + j]), ghn = to_acc(ws[3 * h + j]);
      const A dnp = dhs * (A(1) - z) * (A(1) - n * n);
      const A drp = dnp * ghn * rr * (A(1) - rr);
      const A dzp = dhs * (to_acc(p.h_prev[idx]) - n) * z * (A(1) - z);
      T* dgh = p.dgh + r * g;
      dgx[j] = dgh[j] = from_acc<T>(drp);
      dgx[h + j] = dgh[h + j] = from_acc<T>(dzp);
      dgx[2 * h + j] = from_acc<T>(dnp);
      dgh[2 * h + j] = from_acc<T>(dnp * rr);
      p.dh_direct[idx] = from_acc<T>(dhs * z);
    } else {
      const A y = to_acc(p.h[idx]);
      dgx[j] = from_acc<T>(kind == RnnCell::Tanh ? dhs * (A(1) - y * y) : (y > A(0) ? dhs : A(0)));
    }
  }
}

template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}
template <class T>
T* mptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

void rnn_cell_cuda(const RnnStep& s) {
  const int64_t batch = s.gx.shape()[0], h = s.gx.shape()[1] / rnn_gates(s.kind);
  if (batch * h == 0) return;
  const int dev = s.gx.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(s.gx.dtype(), "rnn_cell", [&]<class T>(TypeTag<T>) {
    const CellPtrs<T> p{cptr<T>(s.gx),     cptr<T>(s.gh), cptr<T>(s.bias), cptr<T>(s.h_prev),
                        cptr<T>(s.c_prev), mptr<T>(s.h),  mptr<T>(s.c),    mptr<T>(s.ws)};
    rnn_cell_kernel<T>
        <<<grid_for(batch * h, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(p, s.kind, batch, h);
    HG_CUDA_CHECK_LAUNCH();
  });
}

void rnn_cell_backward_cuda(const RnnStepGrad& s) {
  const int64_t batch = s.dgx.shape()[0], h = s.dgx.shape()[1] / rnn_gates(s.kind);
  if (batch * h == 0) return;
  const int dev = s.dgx.device().index;
  DeviceGuard guard(dev);
  dispatch_floating(s.dgx.dtype(), "rnn_cell_backward", [&]<class T>(TypeTag<T>) {
    const GradPtrs<T> p{cptr<T>(s.dy),     cptr<T>(s.dh),     cptr<T>(s.dc),        cptr<T>(s.ws),
                        cptr<T>(s.h_prev), cptr<T>(s.c_prev), cptr<T>(s.h),         cptr<T>(s.c),
                        mptr<T>(s.dgx),    mptr<T>(s.dgh),    mptr<T>(s.dh_direct), mptr<T>(s.dc_prev)};
    rnn_cell_backward_kernel<T>
        <<<grid_for(batch * h, kThreads, 1, dev), kThreads, 0, current_stream(dev)>>>(p, s.kind, batch, h);
    HG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

HG_REGISTER_KERNEL(rnn_cell_stub, kCUDA, rnn_cell_cuda);
HG_REGISTER_KERNEL(rnn_cell_backward_stub, kCUDA, rnn_cell_backward_cuda);

}  // namespace hg::cuda
