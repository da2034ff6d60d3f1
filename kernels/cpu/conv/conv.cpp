// CPU conv2d: through oneDNN's primitives where they take the dtype (conv/onednn.h: bfloat16
// where the CPU has bfloat16 units, float32 and float16 where it has AVX-512), else im2col + gemm
// (gemm/blas.h: oneDNN or OpenBLAS, as the router says), one sample at a time per thread so each sample's column
// buffer stays in cache between its packing and its gemm.
// float16/bfloat16 are widened to float32 while packing, accumulated in float32 and rounded
// once when written back.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "framework/ops/conv_kernels.h"
#include "framework/ops/creation.h"
#include "kernels/cpu/conv/im2col.h"
#include "kernels/cpu/conv/onednn.h"
#include "kernels/cpu/conv/pool_2x2.h"
#include "kernels/cpu/conv/relu_grad.h"
#include "kernels/cpu/gemm/blas.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/workspace.h"

namespace hg::cpu {
namespace {

template <class T, class Acc>
void widen(const T* src, Acc* dst, int64_t n) {
  load_run(src, dst, n);
}

// Runs body(claim) once per thread; claim() hands out the next unprocessed sample, or -1 when
// none is left. Samples are claimed one at a time rather than split in fixed halves, so a
// thread slowed down by other work on the machine does not leave the other one waiting. With
// two or more samples each thread runs its gemms single-threaded (oneDNN runs on the calling
// thread inside a pool task, OpenBLAS under the guard); a single sample's gemms use all threads.
template <class Body>
void for_samples(int64_t n, Body&& body) {
  std::atomic<int64_t> next{0};
  auto claim = [&]() -> int64_t {
    const int64_t s = next.fetch_add(1, std::memory_order_relaxed);
    return s < n ? s : -1;
  };
  if (n >= 2) {
    BlasSingleThreadGuard guard;
    run_parallel(num_threads(), [&](int64_t) { body(claim); });
  } else if (n == 1) {
    body(claim);
  }
}

// Weights as a dense Acc matrix [o, ckk]: the tensor itself for float/double, a widened copy
// for 16-bit types.
template <class T, class Acc>
struct AccMatrix {
  std::vector<Acc> copy;
  const Acc* ptr;
  AccMatrix(const T* src, int64_t n) {
    if constexpr (std::is_same_v<T, Acc>) {
      ptr = src;
    } else {
      copy.resize(static_cast<size_t>(n));
      widen(src, copy.data(), n);
      ptr = copy.data();
    }
  }
};

// conv2d_relu_max_pool2d's outputs: each sample's output block is pooled while in cache.
template <class T>
struct PoolInto {
  T* values;       // [N, O, OH/2, OW/2]
  uint8_t* which;  // the same shape: each window's choice, 0..3
};

// out [N, O, oh, ow] = the convolution (ReLU'd with prm.relu); with `pool`, out is not written
// (nullptr): each sample's block goes to a per-thread buffer and is pooled into *pool from there.
template <class T>
void forward_typed(T* y, int64_t oh, int64_t ow, const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& prm, const PoolInto<T>* pool = nullptr) {
  using Acc = acc_t<T>;
  constexpr bool kSame = std::is_same_v<T, Acc>;
  const ConvGeometry g = conv_geometry(input, weight, oh, ow, prm);
  const T* x = static_cast<const T*>(input.raw_data());
  const AccMatrix<T, Acc> wm(static_cast<const T*>(weight.raw_data()), g.o * g.ckk);
  const bool has_bias = bias.defined();
  std::vector<Acc> b(static_cast<size_t>(g.o), Acc(0));
  if (has_bias) widen(static_cast<const T*>(bias.raw_data()), b.data(), g.o);
  const bool pack = !(g.pointwise() && kSame);
  // With a column matrix, the bias rides in the gemm as one more reduction row: ones under
  // the columns and the bias as an extra weight column (k = ckk + 1), so the gemm's write is
  // the output's first and only one. Filling the fresh output with the bias first (beta 1)
  // pulled every line in from memory: 2.5% of the CNN step.
  const bool fold_bias = has_bias && pack;
  const int64_t kk = g.ckk + (fold_bias ? 1 : 0);
  std::vector<Acc> wb;
  const Acc* wptr = wm.ptr;
  if (fold_bias) {
    wb.resize(static_cast<size_t>(g.o * kk));
    for (int64_t r = 0; r < g.o; ++r) {
      std::copy_n(wm.ptr + r * g.ckk, g.ckk, wb.begin() + r * kk);
      wb[static_cast<size_t>(r * kk + g.ckk)] = b[static_cast<size_t>(r)];
    }
    wptr = wb.data();
  }
  const int64_t pooled_plane = (g.oh / 2) * (g.ow / 2);
  for_samples(g.n, [&](auto&& claim) {
    Workspace<Acc> col(pack ? kk * g.p : 0), acc(kSame ? 0 : g.og * g.p);
    Workspace<T> block(pool != nullptr ? g.o * g.p : 0);                // the sample's output, when pooled
    if (fold_bias) std::fill_n(col.data() + g.ckk * g.p, g.p, Acc(1));  // im2col leaves this row alone
    for (int64_t s; (s = claim()) >= 0;) {
      T* sample_out = pool != nullptr ? block.data() : y + s * g.o * g.p;
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const T* xg = x + (s * g.c + gi * g.cg) * g.h * g.w;
        T* yg = sample_out + gi * g.og * g.p;
        const Acc* cols;
        if (pack) {
          im2col(xg, col.data(), g);
          cols = col.data();
        } else {
          cols = reinterpret_cast<const Acc*>(xg);
        }
        Acc* dst = kSame ? reinterpret_cast<Acc*>(yg) : acc.data();
        // Unpacked (1x1) input with a bias: the gemm adds to the bias (beta 1).
        const bool add_to_bias = has_bias && !fold_bias;
        if (add_to_bias)
          for (int64_t r = 0; r < g.og; ++r) std::fill_n(dst + r * g.p, g.p, b[static_cast<size_t>(gi * g.og + r)]);
        gemm(false, false, g.og, g.p, kk, wptr + gi * g.og * kk, kk, cols, g.p, dst, g.p, add_to_bias);
        // conv2d_relu's ReLU on the sample's block while it is still in cache (before the 16-bit
        // rounding, which commutes with it).
        if (prm.relu) relu_in_place(dst, g.og * g.p);
        // The single rounding to T, while the block is still in cache.
        if constexpr (!kSame)
          for (int64_t r = 0; r < g.og; ++r) store_run(dst + r * g.p, yg + r * g.p, g.p);
      }
      // conv2d_relu_max_pool2d: the sample's 2x2 pool from the block in cache (on the rounded
      // values, as the unfused ops see them); the block itself is not kept.
      if (pool != nullptr)
        max_pool_2x2_codes_planes(block.data(), pool->values + s * g.o * pooled_plane,
                                  pool->which + s * g.o * pooled_plane, g.o, g.oh, g.ow);
    }
  });
}

// A thread's column matrix [ckk, oh*ow] for the backward passes below, which take turns with it
// (none for an unpadded 1x1 kernel on float/double: neither pass packs then).
template <class T>
Workspace<acc_t<T>> backward_columns(const ConvGeometry& g) {
  const bool packs = !(g.pointwise() && std::is_same_v<T, acc_t<T>>);
  return Workspace<acc_t<T>>(packs ? g.ckk * g.p : 0);
}

// One thread's input-gradient pass, a sample at a time: the column gradient W^T gy (into `col`,
// a backward_columns buffer) scattered back to the pixels it was packed from (col2im), or for
// unpadded 1x1 kernels the gemm's result itself.
template <class T>
class DataPass {
  using Acc = acc_t<T>;
  static constexpr bool kSame = std::is_same_v<T, Acc>;

 public:
  DataPass(const ConvGeometry& g, const Acc* weight, Acc* col)
      : g_(g), w_(weight), direct_(g.pointwise() && kSame), chw_(g.c * g.h * g.w), col_(col), gxw_(kSame ? 0 : chw_) {}
  // gys: one sample's output gradient [o, oh*ow]; gx: its input gradient [c, h, w], overwritten.
  void run(const Acc* gys, T* gx) {
    Acc* dx = kSame ? reinterpret_cast<Acc*>(gx) : gxw_.data();
    if (!direct_) std::fill(dx, dx + chw_, Acc(0));
    for (int64_t gi = 0; gi < g_.groups; ++gi) {
      const Acc* wg = w_ + gi * g_.og * g_.ckk;
      const Acc* gyg = gys + gi * g_.og * g_.p;
      Acc* dxg = dx + gi * g_.cg * g_.h * g_.w;
      if (direct_) {
        gemm(true, false, g_.ckk, g_.p, g_.og, wg, g_.ckk, gyg, g_.p, dxg, g_.p, false);
      } else {
        gemm(true, false, g_.ckk, g_.p, g_.og, wg, g_.ckk, gyg, g_.p, col_, g_.p, false);
        col2im(col_, dxg, g_);
      }
    }
    if constexpr (!kSame) store_run(dx, gx, chw_);
  }

 private:
  const ConvGeometry& g_;
  const Acc* w_;
  bool direct_;
  int64_t chw_;
  Acc* col_;
  Workspace<Acc> gxw_;
};

// One thread's weight-gradient pass, a sample at a time (its input packed into `col`, a
// backward_columns buffer), summed into the thread's own partials.
template <class T>
class FilterPass {
  using Acc = acc_t<T>;
  static constexpr bool kSame = std::is_same_v<T, Acc>;

 public:
  FilterPass(const ConvGeometry& g, bool want_bias, Acc* col)
      : g_(g),
        pack_(!(g.pointwise() && kSame)),
        want_bias_(want_bias),
        col_(col),
        dw_(static_cast<size_t>(g.o * g.ckk), Acc(0)),
        db_(static_cast<size_t>(g.o), Acc(0)) {}
  // gys: one sample's output gradient [o, oh*ow]; x: its input [c, h, w].
  void run(const Acc* gys, const T* x) {
    if (want_bias_)
      for (int64_t r = 0; r < g_.o; ++r) db_[static_cast<size_t>(r)] += row_sum(gys + r * g_.p, g_.p);
    for (int64_t gi = 0; gi < g_.groups; ++gi) {
      const T* xg = x + gi * g_.cg * g_.h * g_.w;
      const Acc* cols;
      if (pack_) {
        im2col(xg, col_, g_);
        cols = col_;
      } else {
        cols = reinterpret_cast<const Acc*>(xg);
      }
      gemm(false, true, g_.og, g_.ckk, g_.p, gys + gi * g_.og * g_.p, g_.p, cols, g_.p,
           dw_.data() + gi * g_.og * g_.ckk, g_.ckk, true);
    }
  }
  const std::vector<Acc>& weight_sums() const { return dw_; }
  const std::vector<Acc>& bias_sums() const { return db_; }

 private:
  const ConvGeometry& g_;
  bool pack_, want_bias_;
  Acc* col_;
  std::vector<Acc> dw_, db_;
};

// The threads' weight-gradient partials, added once each thread is done, then rounded once to T.
template <class T>
class FilterSums {
  using Acc = acc_t<T>;

 public:
  explicit FilterSums(const ConvGeometry& g)
      : dw_(static_cast<size_t>(g.o * g.ckk), Acc(0)), db_(static_cast<size_t>(g.o), Acc(0)) {}
  void add(const FilterPass<T>& pass) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < dw_.size(); ++i) dw_[i] += pass.weight_sums()[i];
    for (size_t i = 0; i < db_.size(); ++i) db_[i] += pass.bias_sums()[i];
  }
  void write(const Tensor& grad_weight, const Tensor& grad_bias) const {
    T* gw = static_cast<T*>(grad_weight.raw_data());
    for (size_t i = 0; i < dw_.size(); ++i) gw[i] = static_cast<T>(dw_[i]);
    if (grad_bias.defined()) {
      T* gb = static_cast<T*>(grad_bias.raw_data());
      for (size_t i = 0; i < db_.size(); ++i) gb[i] = static_cast<T>(db_[i]);
    }
  }

 private:
  std::vector<Acc> dw_, db_;
  std::mutex mutex_;
};

// The input- and weight-gradient passes, a sample at a time on each thread (taking turns with one
// column buffer): the input gradient into gx [N, C, H, W] when it is not null (from `weight`), the
// weight and bias gradients when grad_weight / grad_bias are defined (from the input x).
// sample_grad(s, block) gives sample s's output gradient [o, oh*ow] in T: rows of a tensor, or
// made into `block`, a per-thread buffer of block_size values. 16-bit rows are widened once for
// both passes.
template <class T, class SampleGrad>
void backward_by_sample(const ConvGeometry& g, T* gx, const T* x, const T* weight, const Tensor& grad_weight,
                        const Tensor& grad_bias, int64_t block_size, SampleGrad&& sample_grad) {
  using Acc = acc_t<T>;
  constexpr bool kSame = std::is_same_v<T, Acc>;
  const bool want_w = grad_weight.defined();
  const AccMatrix<T, Acc> wm(weight, gx != nullptr ? g.o * g.ckk : 0);
  std::optional<FilterSums<T>> sums;
  if (want_w) sums.emplace(g);
  for_samples(g.n, [&](auto&& claim) {
    Workspace<Acc> col = backward_columns<T>(g);
    std::optional<DataPass<T>> data;
    std::optional<FilterPass<T>> filter;
    if (gx != nullptr) data.emplace(g, wm.ptr, col.data());
    if (want_w) filter.emplace(g, grad_bias.defined(), col.data());
    Workspace<T> block(block_size);
    Workspace<Acc> gyw(kSame ? 0 : g.o * g.p);
    for (int64_t s; (s = claim()) >= 0;) {
      const T* rows = sample_grad(s, block.data());
      const Acc* gys;
      if constexpr (kSame) {
        gys = rows;
      } else {
        widen(rows, gyw.data(), g.o * g.p);
        gys = gyw.data();
      }
      if (data) data->run(gys, gx + s * g.c * g.h * g.w);
      if (filter) filter->run(gys, x + s * g.c * g.h * g.w);
    }
    if (filter) sums->add(*filter);
  });
  if (sums) sums->write(grad_weight, grad_bias);
}

template <class T>
void backward_data_typed(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                         const Conv2dParams& prm) {
  const ConvGeometry g = conv_geometry(grad_input, weight, grad_out.size(2), grad_out.size(3), prm);
  const T* gy = static_cast<const T*>(grad_out.raw_data());
  backward_by_sample<T>(g, static_cast<T*>(grad_input.raw_data()), nullptr, static_cast<const T*>(weight.raw_data()),
                        Tensor(), Tensor(), 0, [&](int64_t s, T*) { return gy + s * g.o * g.p; });
}

template <class T>
void backward_filter_typed(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                           const Tensor& input, const Conv2dParams& prm) {
  const ConvGeometry g = conv_geometry(input, grad_weight, grad_out.size(2), grad_out.size(3), prm);
  const T* gy = static_cast<const T*>(grad_out.raw_data());
  backward_by_sample<T>(g, nullptr, static_cast<const T*>(input.raw_data()), nullptr, grad_weight, grad_bias, 0,
                        [&](int64_t s, T*) { return gy + s * g.o * g.p; });
}

// conv2d_relu's and conv2d_relu_max_pool2d's backward: each sample's convolution output gradient
// made from the op's (conv/relu_grad.h) into a per-thread block right before its two passes, while
// the block is in cache. The values of backward_data_typed and backward_filter_typed on the whole
// output gradient.
template <class T>
void conv_relu_backward_typed(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                              const Conv2dReluGrad& from, const Tensor& input, const Tensor& weight,
                              const Conv2dParams& prm, int64_t oh, int64_t ow) {
  const ConvGeometry g = conv_geometry(input, weight, oh, ow, prm);
  T* gx = grad_input.defined() ? static_cast<T*>(grad_input.raw_data()) : nullptr;
  backward_by_sample<T>(g, gx, static_cast<const T*>(input.raw_data()), static_cast<const T*>(weight.raw_data()),
                        grad_weight, grad_bias, g.o * g.p, [&](int64_t s, T* block) {
                          make_conv_output_grad(from, s, 1, g.o, oh, ow, block);
                          return static_cast<const T*>(block);
                        });
}

// Channels-last activations and weights (conv2d_channels_last_in_kernel: the op passes them as
// they are) that the oneDNN path declined: this file's loops read and write NCHW and OIHW, so
// they run on contiguous copies.
bool channels_last(const Tensor& t) { return t.suggest_memory_format() == MemoryFormat::ChannelsLast; }

void forward_cpu(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                 const Conv2dParams& p) {
  if (onednn_conv2d_forward(out, input, weight, bias, p)) return;
  if (channels_last(input) || channels_last(out) || channels_last(weight)) {
    const Tensor nchw = empty(out.shape(), TensorOptions(out.dtype()));
    forward_cpu(nchw, input.contiguous(), weight.contiguous(), bias, p);
    Tensor(out).copy_(nchw);
    return;
  }
  dispatch_floating(input.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
    forward_typed<T>(static_cast<T*>(out.raw_data()), out.size(2), out.size(3), input, weight, bias, p);
  });
}

bool relu_max_pool_forward_cpu(const Tensor& pooled, const Tensor& which, const Tensor& input, const Tensor& weight,
                               const Tensor& bias, const Conv2dParams& p, int64_t oh, int64_t ow) {
  if (onednn_conv2d_relu_max_pool_forward(pooled, which, input, weight, bias, p, oh, ow)) return true;
  Conv2dParams q = p;
  q.relu = true;
  dispatch_floating(input.dtype(), "conv2d_relu_max_pool2d", [&]<class T>(TypeTag<T>) {
    const PoolInto<T> into{static_cast<T*>(pooled.raw_data()), static_cast<uint8_t*>(which.raw_data())};
    forward_typed<T>(nullptr, oh, ow, input, weight, bias, q, &into);
  });
  return true;
}
void backward_data_cpu(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight, const Conv2dParams& p) {
  if (onednn_conv2d_backward_data(grad_input, grad_out, weight, p)) return;
  if (channels_last(grad_input) || channels_last(grad_out) || channels_last(weight)) {
    const Tensor nchw = empty(grad_input.shape(), TensorOptions(grad_input.dtype()));
    backward_data_cpu(nchw, grad_out.contiguous(), weight.contiguous(), p);
    Tensor(grad_input).copy_(nchw);
    return;
  }
  dispatch_floating(grad_out.dtype(), "conv2d",
                    [&]<class T>(TypeTag<T>) { backward_data_typed<T>(grad_input, grad_out, weight, p); });
}
void backward_filter_cpu(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                         const Tensor& input, const Conv2dParams& p) {
  if (onednn_conv2d_backward_filter(grad_weight, grad_bias, grad_out, input, p)) return;
  // A widened gradient (conv2d_widened_weight_grad_in_kernel): made in 16 bits, then widened.
  if (grad_weight.dtype() != grad_out.dtype()) {
    const Tensor narrow =
        empty(grad_weight.shape(), TensorOptions(grad_out.dtype()), grad_weight.suggest_memory_format());
    backward_filter_cpu(narrow, grad_bias, grad_out, input, p);
    Tensor(grad_weight).copy_(narrow);
    return;
  }
  if (channels_last(grad_weight)) {
    const Tensor oihw = empty(grad_weight.shape(), TensorOptions(grad_weight.dtype()));
    backward_filter_cpu(oihw, grad_bias, grad_out, input, p);
    Tensor(grad_weight).copy_(oihw);
    return;
  }
  if (channels_last(grad_out) || channels_last(input))
    return backward_filter_cpu(grad_weight, grad_bias, grad_out.contiguous(), input.contiguous(), p);
  dispatch_floating(grad_out.dtype(), "conv2d",
                    [&]<class T>(TypeTag<T>) { backward_filter_typed<T>(grad_weight, grad_bias, grad_out, input, p); });
}

bool conv_relu_backward_cpu(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                            const Conv2dReluGrad& from, const Tensor& input, const Tensor& weight,
                            const Conv2dParams& p, int64_t oh, int64_t ow) {
  if (!grad_input.defined() && !grad_weight.defined()) return false;
  if (onednn_conv2d_relu_backward(grad_input, grad_weight, grad_bias, from, input, weight, p, oh, ow)) return true;
  dispatch_floating(input.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
    conv_relu_backward_typed<T>(grad_input, grad_weight, grad_bias, from, input, weight, p, oh, ow);
  });
  return true;
}

bool backward_both_cpu(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                       const Tensor& grad_out, const Tensor& input, const Tensor& weight, const Conv2dParams& p) {
  return onednn_conv2d_backward(grad_input, grad_weight, grad_bias, grad_out, input, weight, p);
}

}  // namespace

HG_REGISTER_KERNEL(conv2d_forward_stub, kCPU, forward_cpu);
HG_REGISTER_KERNEL(conv2d_backward_stub, kCPU, backward_both_cpu);
HG_REGISTER_KERNEL(conv2d_relu_max_pool_forward_stub, kCPU, relu_max_pool_forward_cpu);
HG_REGISTER_KERNEL(conv2d_relu_backward_stub, kCPU, conv_relu_backward_cpu);
HG_REGISTER_KERNEL(conv2d_backward_data_stub, kCPU, backward_data_cpu);
HG_REGISTER_KERNEL(conv2d_backward_filter_stub, kCPU, backward_filter_cpu);

}  // namespace hg::cpu
