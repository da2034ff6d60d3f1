// CPU layer_norm and batch_norm, forward and backward, each one fused pass (plus a statistics
// pass). Sums run in double so long rows/channels of float32 or 16-bit values keep their
// precision (batch_norm's add float32 lanes over short blocks into them); elementwise work runs
// in float32 for 16-bit inputs with one rounding at the end.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/ops/norm_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/lanes16.h"

namespace hg::cpu {
namespace {

// A small per-feature tensor (weight, bias, statistics) as Acc values; `fallback` when undefined.
template <class Acc>
std::vector<Acc> read_vector(const Tensor& t, int64_t n, Acc fallback) {
  std::vector<Acc> v(static_cast<size_t>(n), fallback);
  if (!t.defined()) return v;
  dispatch_floating(t.dtype(), "norm", [&]<class P>(TypeTag<P>) {
    const P* p = static_cast<const P*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<Acc>(static_cast<acc_t<P>>(p[i]));
  });
  return v;
}

template <class Acc>
void write_vector(const Tensor& t, const std::vector<Acc>& v) {
  if (!t.defined()) return;
  dispatch_floating(t.dtype(), "norm", [&]<class P>(TypeTag<P>) {
    P* p = static_cast<P*>(t.raw_data());
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<P>(static_cast<acc_t<P>>(v[i]));
  });
}

int64_t grain_for(int64_t row) { return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(row, 1)); }

// Adds each thread's partial sums into `total` once, at the end of its chunk.
void add_partial(std::vector<double>& total, const std::vector<double>& part) {
  static std::mutex partials_mutex;
  std::lock_guard lock(partials_mutex);
  for (size_t i = 0; i < total.size(); ++i) total[i] += part[i];
}

template <class T>
void layer_norm_typed(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                      const Tensor& bias, double eps) {
  using Acc = acc_t<T>;
  const int64_t rows = mean.numel(), cols = x.numel() / rows;
  const std::vector<Acc> w = read_vector<Acc>(weight, cols, Acc(1)), b = read_vector<Acc>(bias, cols, Acc(0));
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(out.raw_data());
  Acc* mp = static_cast<Acc*>(mean.raw_data());
  Acc* rp = static_cast<Acc*>(rstd.raw_data());
  parallel_for(rows, grain_for(cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = xp + r * cols;
      double s = 0;
      for (int64_t j = 0; j < cols; ++j) s += static_cast<double>(static_cast<Acc>(xr[j]));
      const double m = s / static_cast<double>(cols);
      double ss = 0;  // two passes: the variance of values far from zero stays exact
      for (int64_t j = 0; j < cols; ++j) {
        const double d = static_cast<double>(static_cast<Acc>(xr[j])) - m;
        ss += d * d;
      }
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
      mp[r] = static_cast<Acc>(m), rp[r] = static_cast<Acc>(inv);
      const Acc am = static_cast<Acc>(m), ai = static_cast<Acc>(inv);
      T* yr = yp + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const auto ju = static_cast<size_t>(j);
        yr[j] = static_cast<T>((static_cast<Acc>(xr[j]) - am) * ai * w[ju] + b[ju]);
      }
    }
  });
}

template <class T>
void layer_norm_backward_typed(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                               const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  using Acc = acc_t<T>;
  const int64_t rows = mean.numel(), cols = rows ? x.numel() / rows : 0;
  const std::vector<Acc> w = read_vector<Acc>(weight, cols, Acc(1));
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* gp = static_cast<const T*>(gy.raw_data());
  const Acc* mp = static_cast<const Acc*>(mean.raw_data());
  const Acc* rp = static_cast<const Acc*>(rstd.raw_data());
  std::vector<double> dw(static_cast<size_t>(cols), 0.0), db(static_cast<size_t>(cols), 0.0);
  const bool want_params = gw.defined() || gb.defined();
  parallel_for(rows, grain_for(cols), [&](int64_t begin, int64_t end) {
    std::vector<double> pdw(want_params ? dw.size() : 0, 0.0), pdb(want_params ? db.size() : 0, 0.0);
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = xp + r * cols;
      const T* gr = gp + r * cols;
      const Acc m = mp[r], inv = rp[r];
      if (want_params) {
        for (int64_t j = 0; j < cols; ++j) {
          const Acc g = static_cast<Acc>(gr[j]);
          pdw[static_cast<size_t>(j)] += static_cast<double>(g * (static_cast<Acc>(xr[j]) - m) * inv);
          pdb[static_cast<size_t>(j)] += static_cast<double>(g);
        }
      }
      if (!gx.defined()) continue;
      // dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * weight.
      double sg = 0, sgx = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const Acc g = static_cast<Acc>(gr[j]) * w[static_cast<size_t>(j)];
        sg += static_cast<double>(g);
        sgx += static_cast<double>(g * (static_cast<Acc>(xr[j]) - m) * inv);
      }
      const Acc mg = static_cast<Acc>(sg / static_cast<double>(cols)),
                mgx = static_cast<Acc>(sgx / static_cast<double>(cols));
      T* dx = static_cast<T*>(gx.raw_data()) + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const Acc g = static_cast<Acc>(gr[j]) * w[static_cast<size_t>(j)];
        const Acc xh = (static_cast<Acc>(xr[j]) - m) * inv;
        dx[j] = static_cast<T>(inv * (g - mg - xh * mgx));
      }
    }
    if (want_params) {
      add_partial(dw, pdw);
      add_partial(db, pdb);
    }
  });
  write_vector(gw, dw);
  write_vector(gb, db);
}

// batch_norm's per-channel outputs: the mean and 1/sqrt(var + eps) it used and, when `running_mean`
// is defined (training with running statistics), the updated running values.
template <class Acc>
void write_statistics(const Tensor& save_mean, const Tensor& save_invstd, const std::vector<Acc>& mean,
                      const std::vector<Acc>& invstd, const Tensor& running_mean, const Tensor& running_var,
                      const std::vector<double>& rm, const std::vector<double>& rv) {
  write_vector(save_mean, mean);
  write_vector(save_invstd, invstd);
  if (!running_mean.defined()) return;
  write_vector(running_mean, rm);
  write_vector(running_var, rv);
}

// batch_norm's passes over one channel's plane of float32 or 16-bit values, 16 lanes at a time:
// a double chain per element (the scalar loops) runs one add per 3-4 cycles, the float32 lanes
// sixteen per add. Each lane sums at most kBnBlock / 16 values in float32 before the block's
// total goes into a double, so a long plane keeps the double sum's precision.
constexpr int64_t kBnBlock = 2048;

// sum(x) over the plane.
template <class T>
double bn_plane_sum(const T* x, int64_t len) {
  double total = 0;
  for (int64_t b = 0; b < len; b += kBnBlock) {
    const int64_t e = std::min(len, b + kBnBlock);
    Lanes16 a0{}, a1{};
    int64_t j = b;
    for (; j + 32 <= e; j += 32) {
      a0 += load_lanes16(x + j);
      a1 += load_lanes16(x + j + 16);
    }
    if (j + 16 <= e) a0 += load_lanes16(x + j), j += 16;
    float tail = 0;
    for (; j < e; ++j) tail += static_cast<float>(x[j]);
    total += static_cast<double>(lanes16_sum(a0 + a1)) + static_cast<double>(tail);
  }
  return total;
}

// sum((x - m)^2) over the plane.
template <class T>
double bn_plane_squares(const T* x, int64_t len, float m) {
  double total = 0;
  for (int64_t b = 0; b < len; b += kBnBlock) {
    const int64_t e = std::min(len, b + kBnBlock);
    Lanes16 a0{}, a1{};
    int64_t j = b;
    for (; j + 32 <= e; j += 32) {
      const Lanes16 d0 = load_lanes16(x + j) - m, d1 = load_lanes16(x + j + 16) - m;
      a0 += d0 * d0;
      a1 += d1 * d1;
    }
    if (j + 16 <= e) {
      const Lanes16 d = load_lanes16(x + j) - m;
      a0 += d * d, j += 16;
    }
    float tail = 0;
    for (; j < e; ++j) {
      const float d = static_cast<float>(x[j]) - m;
      tail += d * d;
    }
    total += static_cast<double>(lanes16_sum(a0 + a1)) + static_cast<double>(tail);
  }
  return total;
}

// y = x * scale + shift over the plane, rounded once to T.
template <class T>
void bn_plane_affine(const T* x, T* y, int64_t len, float scale, float shift) {
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) store_lanes16(y + j, load_lanes16(x + j) * scale + shift);
  if (j < len) store_lanes16_partial(y + j, load_lanes16_partial(x + j, len - j) * scale + shift, len - j);
}

// {sum(g), sum(g (x - m))} over the plane.
template <class T>
std::pair<double, double> bn_plane_grad_sums(const T* g, const T* x, int64_t len, float m) {
  double sg = 0, sgx = 0;
  for (int64_t b = 0; b < len; b += kBnBlock) {
    const int64_t e = std::min(len, b + kBnBlock);
    Lanes16 ag0{}, ag1{}, ax0{}, ax1{};
    int64_t j = b;
    for (; j + 32 <= e; j += 32) {
      const Lanes16 g0 = load_lanes16(g + j), g1 = load_lanes16(g + j + 16);
      ag0 += g0, ag1 += g1;
      ax0 += g0 * (load_lanes16(x + j) - m);
      ax1 += g1 * (load_lanes16(x + j + 16) - m);
    }
    if (j + 16 <= e) {
      const Lanes16 g0 = load_lanes16(g + j);
      ag0 += g0, ax0 += g0 * (load_lanes16(x + j) - m), j += 16;
    }
    float tg = 0, tx = 0;
    for (; j < e; ++j) {
      const float gj = static_cast<float>(g[j]);
      tg += gj, tx += gj * (static_cast<float>(x[j]) - m);
    }
    sg += static_cast<double>(lanes16_sum(ag0 + ag1)) + static_cast<double>(tg);
    sgx += static_cast<double>(lanes16_sum(ax0 + ax1)) + static_cast<double>(tx);
  }
  return {sg, sgx};
}

// dx = a g + b (x - m) + c over the plane, rounded once to T.
template <class T>
void bn_plane_grad(const T* g, const T* x, T* dx, int64_t len, float m, float a, float b, float c) {
  int64_t j = 0;
  for (; j + 16 <= len; j += 16) store_lanes16(dx + j, load_lanes16(g + j) * a + (load_lanes16(x + j) - m) * b + c);
  if (j < len) {
    const int64_t r = len - j;
    store_lanes16_partial(dx + j, load_lanes16_partial(g + j, r) * a + (load_lanes16_partial(x + j, r) - m) * b + c, r);
  }
}

template <class T>
void batch_norm_typed(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                      const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                      bool training, double momentum, double eps) {
  using Acc = acc_t<T>;
  constexpr bool kLanes = std::is_same_v<Acc, float>;  // the bn_plane_* passes; float64 stays scalar
  const int64_t n = x.size(0), c = x.size(1), s = n && c ? x.numel() / (n * c) : 0, count = n * s;
  const std::vector<Acc> w = read_vector<Acc>(weight, c, Acc(1)), b = read_vector<Acc>(bias, c, Acc(0));
  std::vector<double> rm = read_vector<double>(running_mean, c, 0.0), rv = read_vector<double>(running_var, c, 1.0);
  std::vector<Acc> mean(static_cast<size_t>(c)), invstd(static_cast<size_t>(c));
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(out.raw_data());
  parallel_for(c, grain_for(count), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      const auto cu = static_cast<size_t>(ch);
      double m, var;
      if (training) {
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = xp + (i * c + ch) * s;
          if constexpr (kLanes) {
            sum += bn_plane_sum(row, s);
          } else {
            for (int64_t j = 0; j < s; ++j) sum += static_cast<double>(static_cast<Acc>(row[j]));
          }
        }
        m = sum / static_cast<double>(count);
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = xp + (i * c + ch) * s;
          if constexpr (kLanes) {
            ss += bn_plane_squares(row, s, static_cast<float>(m));
          } else {
            for (int64_t j = 0; j < s; ++j) {
              const double d = static_cast<double>(static_cast<Acc>(row[j])) - m;
              ss += d * d;
            }
          }
        }
        var = ss / static_cast<double>(count);
        if (running_mean.defined()) {
          rm[cu] = (1 - momentum) * rm[cu] + momentum * m;
          rv[cu] = (1 - momentum) * rv[cu] + momentum * ss / static_cast<double>(count - 1);
        }
      } else {
        m = rm[cu], var = rv[cu];
      }
      const double inv = 1.0 / std::sqrt(var + eps);
      mean[cu] = static_cast<Acc>(m), invstd[cu] = static_cast<Acc>(inv);
      // y = x * scale + shift, folded per channel.
      const Acc scale = static_cast<Acc>(inv * static_cast<double>(w[cu]));
      const Acc shift = static_cast<Acc>(static_cast<double>(b[cu]) - m * inv * static_cast<double>(w[cu]));
      for (int64_t i = 0; i < n; ++i) {
        const T* row = xp + (i * c + ch) * s;
        T* orow = yp + (i * c + ch) * s;
        if constexpr (kLanes) {
          bn_plane_affine(row, orow, s, scale, shift);
        } else {
          for (int64_t j = 0; j < s; ++j) orow[j] = static_cast<T>(static_cast<Acc>(row[j]) * scale + shift);
        }
      }
    }
  });
  write_statistics(save_mean, save_invstd, mean, invstd, training ? running_mean : Tensor(), running_var, rm, rv);
}

template <class T>
void batch_norm_backward_typed(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                               const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                               bool training) {
  using Acc = acc_t<T>;
  constexpr bool kLanes = std::is_same_v<Acc, float>;  // the bn_plane_* passes; float64 stays scalar
  const int64_t n = x.size(0), c = x.size(1), s = n && c ? x.numel() / (n * c) : 0, count = n * s;
  const std::vector<Acc> w = read_vector<Acc>(weight, c, Acc(1));
  const Acc* mp = static_cast<const Acc*>(save_mean.raw_data());
  const Acc* ip = static_cast<const Acc*>(save_invstd.raw_data());
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* gp = static_cast<const T*>(gy.raw_data());
  std::vector<double> dw(static_cast<size_t>(c)), db(static_cast<size_t>(c));
  parallel_for(c, grain_for(count), [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      const Acc m = mp[ch], inv = ip[ch];
      double sg = 0, sgx = 0;  // sum(dy), sum(dy * xhat)
      for (int64_t i = 0; i < n; ++i) {
        const T* xr = xp + (i * c + ch) * s;
        const T* gr = gp + (i * c + ch) * s;
        if constexpr (kLanes) {
          const auto [g, gx_] = bn_plane_grad_sums(gr, xr, s, m);
          sg += g, sgx += gx_ * static_cast<double>(inv);
        } else {
          for (int64_t j = 0; j < s; ++j) {
            const Acc g = static_cast<Acc>(gr[j]);
            sg += static_cast<double>(g);
            sgx += static_cast<double>(g * (static_cast<Acc>(xr[j]) - m) * inv);
          }
        }
      }
      dw[static_cast<size_t>(ch)] = sgx, db[static_cast<size_t>(ch)] = sg;
      if (!gx.defined()) continue;
      // Training: dx = w rstd (dy - mean(dy) - xhat mean(dy xhat)); eval: the statistics are
      // constants, so dx = w rstd dy.
      const Acc scale = w[static_cast<size_t>(ch)] * inv;
      const Acc mg = training ? static_cast<Acc>(sg / static_cast<double>(count)) : Acc(0);
      const Acc mgx = training ? static_cast<Acc>(sgx / static_cast<double>(count)) : Acc(0);
      for (int64_t i = 0; i < n; ++i) {
        const T* xr = xp + (i * c + ch) * s;
        const T* gr = gp + (i * c + ch) * s;
        T* dx = static_cast<T*>(gx.raw_data()) + (i * c + ch) * s;
        if constexpr (kLanes) {
          bn_plane_grad(gr, xr, dx, s, m, scale, -scale * inv * mgx, -scale * mg);
          continue;
        }
        for (int64_t j = 0; j < s; ++j) {
          const Acc xh = (static_cast<Acc>(xr[j]) - m) * inv;
          dx[j] = static_cast<T>(scale * (static_cast<Acc>(gr[j]) - mg - xh * mgx));
        }
      }
    }
  });
  write_vector(gw, dw);
  write_vector(gb, db);
}

// batch_norm over a channels-last x, viewed as [rows = N*H*W, C]: each pass walks the rows, 16
// channels per lane vector. The sums are taken per fixed block of kBnRows rows in float32 (a
// block's total then goes into a double, as the planes' blocks do), and the blocks are added in
// order, so the statistics do not depend on how the pool cut the rows.
constexpr int64_t kBnRows = 64;

// acc[ch] += the sum over rows [r0, r1) of x[r][ch], or with `center` of (x[r][ch] - center[ch])^2.
// The rows are a block in cache: each group of 16 channels is summed down the rows in a register.
template <class T, class Acc>
void bn_block_sums(const T* x, int64_t r0, int64_t r1, int64_t c, Acc* acc, const Acc* center) {
  int64_t j = 0;
  if constexpr (std::is_same_v<Acc, float>) {
    for (; j + 16 <= c; j += 16) {
      Lanes16 a{};
      if (center != nullptr) {
        const Lanes16 m = load_lanes16(center + j);
        for (int64_t r = r0; r < r1; ++r) {
          const Lanes16 d = load_lanes16(x + r * c + j) - m;
          a += d * d;
        }
      } else {
        for (int64_t r = r0; r < r1; ++r) a += load_lanes16(x + r * c + j);
      }
      store_lanes16(acc + j, load_lanes16(acc + j) + a);
    }
  }
  for (; j < c; ++j)
    for (int64_t r = r0; r < r1; ++r) {
      const Acc v = static_cast<Acc>(x[r * c + j]);
      acc[j] += center != nullptr ? (v - center[j]) * (v - center[j]) : v;
    }
}

// `width` double totals (a sum per channel, or several sums' channels side by side): each fixed
// block of rows fills zeroed Acc sums through block_sums(first row, end row, sums), and the
// blocks' sums are added in block order.
template <class Acc, class F>
std::vector<double> bn_column_sums(int64_t rows, int64_t width, const F& block_sums) {
  const int64_t blocks = (rows + kBnRows - 1) / kBnRows;
  std::vector<double> parts(static_cast<size_t>(blocks * width));
  parallel_for(blocks, grain_for(kBnRows * width), [&](int64_t begin, int64_t end) {
    std::vector<Acc> acc(static_cast<size_t>(width));
    for (int64_t blk = begin; blk < end; ++blk) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      block_sums(blk * kBnRows, std::min(rows, (blk + 1) * kBnRows), acc.data());
      std::copy(acc.begin(), acc.end(), parts.begin() + blk * width);
    }
  });
  std::vector<double> total(static_cast<size_t>(width));
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int64_t i = 0; i < width; ++i) total[static_cast<size_t>(i)] += parts[static_cast<size_t>(blk * width + i)];
  return total;
}

template <class T>
void batch_norm_nhwc_typed(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                           const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, bool training, double momentum, double eps) {
  using Acc = acc_t<T>;
  const int64_t c = x.size(1), rows = c ? x.numel() / c : 0;
  const std::vector<Acc> w = read_vector<Acc>(weight, c, Acc(1)), b = read_vector<Acc>(bias, c, Acc(0));
  std::vector<double> rm = read_vector<double>(running_mean, c, 0.0), rv = read_vector<double>(running_var, c, 1.0);
  std::vector<Acc> mean(static_cast<size_t>(c)), invstd(static_cast<size_t>(c)), scale(static_cast<size_t>(c)),
      shift(static_cast<size_t>(c));
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(out.raw_data());
  std::vector<double> m(static_cast<size_t>(c)), var(static_cast<size_t>(c));
  if (training) {
    const std::vector<double> sum = bn_column_sums<Acc>(
        rows, c, [&](int64_t r0, int64_t r1, Acc* acc) { bn_block_sums<T, Acc>(xp, r0, r1, c, acc, nullptr); });
    for (int64_t ch = 0; ch < c; ++ch) {
      m[static_cast<size_t>(ch)] = sum[static_cast<size_t>(ch)] / static_cast<double>(rows);
      mean[static_cast<size_t>(ch)] = static_cast<Acc>(m[static_cast<size_t>(ch)]);
    }
    const std::vector<double> ss = bn_column_sums<Acc>(
        rows, c, [&](int64_t r0, int64_t r1, Acc* acc) { bn_block_sums<T, Acc>(xp, r0, r1, c, acc, mean.data()); });
    for (int64_t ch = 0; ch < c; ++ch) {
      const auto cu = static_cast<size_t>(ch);
      var[cu] = ss[cu] / static_cast<double>(rows);
      if (running_mean.defined()) {
        rm[cu] = (1 - momentum) * rm[cu] + momentum * m[cu];
        rv[cu] = (1 - momentum) * rv[cu] + momentum * ss[cu] / static_cast<double>(rows - 1);
      }
    }
  } else {
    m = rm, var = rv;
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    const auto cu = static_cast<size_t>(ch);
    const double inv = 1.0 / std::sqrt(var[cu] + eps);
    mean[cu] = static_cast<Acc>(m[cu]), invstd[cu] = static_cast<Acc>(inv);
    scale[cu] = static_cast<Acc>(inv * static_cast<double>(w[cu]));
    shift[cu] = static_cast<Acc>(static_cast<double>(b[cu]) - m[cu] * inv * static_cast<double>(w[cu]));
  }
  parallel_for(rows, grain_for(c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = xp + r * c;
      T* orow = yp + r * c;
      int64_t j = 0;
      if constexpr (std::is_same_v<Acc, float>) {
        for (; j + 16 <= c; j += 16)
          store_lanes16(orow + j,
                        load_lanes16(row + j) * load_lanes16(scale.data() + j) + load_lanes16(shift.data() + j));
      }
      for (; j < c; ++j)
        orow[j] =
            static_cast<T>(static_cast<Acc>(row[j]) * scale[static_cast<size_t>(j)] + shift[static_cast<size_t>(j)]);
    }
  });
  write_statistics(save_mean, save_invstd, mean, invstd, training ? running_mean : Tensor(), running_var, rm, rv);
}

template <class T>
void batch_norm_backward_nhwc_typed(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy,
                                    const Tensor& x, const Tensor& weight, const Tensor& save_mean,
                                    const Tensor& save_invstd, bool training) {
  using Acc = acc_t<T>;
  const int64_t c = x.size(1), rows = c ? x.numel() / c : 0;
  const std::vector<Acc> w = read_vector<Acc>(weight, c, Acc(1));
  const std::vector<Acc> mean = read_vector<Acc>(save_mean, c, Acc(0)), inv = read_vector<Acc>(save_invstd, c, Acc(1));
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* gp = static_cast<const T*>(gy.raw_data());
  // sum(dy) and sum(dy (x - mean)) per channel, side by side, in one pass over both.
  const std::vector<double> sums = bn_column_sums<Acc>(rows, 2 * c, [&](int64_t r0, int64_t r1, Acc* acc) {
    Acc* ag = acc;
    Acc* ax = acc + c;
    int64_t j = 0;  // each group of 16 channels summed down the block's rows in registers
    if constexpr (std::is_same_v<Acc, float>) {
      for (; j + 16 <= c; j += 16) {
        const Lanes16 m = load_lanes16(mean.data() + j);
        Lanes16 sum_g{}, sum_gx{};
        for (int64_t r = r0; r < r1; ++r) {
          const Lanes16 g = load_lanes16(gp + r * c + j);
          sum_g += g;
          sum_gx += g * (load_lanes16(xp + r * c + j) - m);
        }
        store_lanes16(ag + j, sum_g);
        store_lanes16(ax + j, sum_gx);
      }
    }
    for (; j < c; ++j)
      for (int64_t r = r0; r < r1; ++r) {
        const Acc g = static_cast<Acc>(gp[r * c + j]);
        ag[j] += g;
        ax[j] += g * (static_cast<Acc>(xp[r * c + j]) - mean[static_cast<size_t>(j)]);
      }
  });
  std::vector<double> sg(sums.begin(), sums.begin() + c), sgx(sums.begin() + c, sums.end());
  for (int64_t ch = 0; ch < c; ++ch) sgx[static_cast<size_t>(ch)] *= static_cast<double>(inv[static_cast<size_t>(ch)]);
  write_vector(gw, sgx);
  write_vector(gb, sg);
  if (!gx.defined()) return;
  // dx = a dy + b (x - mean) + k per channel (as bn_plane_grad).
  std::vector<Acc> a(static_cast<size_t>(c)), bcoef(static_cast<size_t>(c)), k(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    const auto cu = static_cast<size_t>(ch);
    const Acc scale = w[cu] * inv[cu];
    const Acc mg = training ? static_cast<Acc>(sg[cu] / static_cast<double>(rows)) : Acc(0);
    const Acc mgx = training ? static_cast<Acc>(sgx[cu] / static_cast<double>(rows)) : Acc(0);
    a[cu] = scale, bcoef[cu] = -scale * inv[cu] * mgx, k[cu] = -scale * mg;
  }
  T* dxp = static_cast<T*>(gx.raw_data());
  parallel_for(rows, grain_for(2 * c), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = xp + r * c;
      const T* gr = gp + r * c;
      T* dr = dxp + r * c;
      int64_t j = 0;
      if constexpr (std::is_same_v<Acc, float>) {
        for (; j + 16 <= c; j += 16)
          store_lanes16(dr + j,
                        load_lanes16(gr + j) * load_lanes16(a.data() + j) +
                            (load_lanes16(xr + j) - load_lanes16(mean.data() + j)) * load_lanes16(bcoef.data() + j) +
                            load_lanes16(k.data() + j));
      }
      for (; j < c; ++j) {
        const auto ju = static_cast<size_t>(j);
        dr[j] =
            static_cast<T>(static_cast<Acc>(gr[j]) * a[ju] + (static_cast<Acc>(xr[j]) - mean[ju]) * bcoef[ju] + k[ju]);
      }
    }
  });
}

// Whether x reached the kernels channels-last (batch_norm_channels_last_in_kernel).
bool nhwc(const Tensor& x) { return x.suggest_memory_format() == MemoryFormat::ChannelsLast; }

void layer_norm_cpu(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& w,
                    const Tensor& b, double eps) {
  dispatch_floating(x.dtype(), "layer_norm",
                    [&]<class T>(TypeTag<T>) { layer_norm_typed<T>(out, mean, rstd, x, w, b, eps); });
}
void layer_norm_backward_cpu(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, const Tensor& w) {
  dispatch_floating(x.dtype(), "layer_norm",
                    [&]<class T>(TypeTag<T>) { layer_norm_backward_typed<T>(gx, gw, gb, gy, x, mean, rstd, w); });
}
void batch_norm_cpu(const Tensor& out, const Tensor& sm, const Tensor& si, const Tensor& x, const Tensor& w,
                    const Tensor& b, const Tensor& rm, const Tensor& rv, bool training, double momentum, double eps) {
  dispatch_floating(x.dtype(), "batch_norm", [&]<class T>(TypeTag<T>) {
    if (nhwc(x))
      batch_norm_nhwc_typed<T>(out, sm, si, x, w, b, rm, rv, training, momentum, eps);
    else
      batch_norm_typed<T>(out, sm, si, x, w, b, rm, rv, training, momentum, eps);
  });
}
void batch_norm_backward_cpu(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                             const Tensor& w, const Tensor& sm, const Tensor& si, bool training) {
  dispatch_floating(x.dtype(), "batch_norm", [&]<class T>(TypeTag<T>) {
    if (nhwc(x))
      batch_norm_backward_nhwc_typed<T>(gx, gw, gb, gy, x, w, sm, si, training);
    else
      batch_norm_backward_typed<T>(gx, gw, gb, gy, x, w, sm, si, training);
  });
}

}  // namespace

HG_REGISTER_KERNEL(layer_norm_stub, kCPU, layer_norm_cpu);
HG_REGISTER_KERNEL(layer_norm_backward_stub, kCPU, layer_norm_backward_cpu);
HG_REGISTER_KERNEL(batch_norm_stub, kCPU, batch_norm_cpu);
HG_REGISTER_KERNEL(batch_norm_backward_stub, kCPU, batch_norm_backward_cpu);

}  // namespace hg::cpu
