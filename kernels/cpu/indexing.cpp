// CPU kernels for the indexing ops (gather, scatter_add, index_select, index_add), where and
// clamp. Indices are validated before anything is written.
#include <cstring>
#include <limits>

#include "framework/ops/indexing_kernels.h"
#include "framework/ops/minmax_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

std::optional<int64_t> first_bad(const int64_t* idx, int64_t n, int64_t size) {
  for (int64_t k = 0; k < n; ++k)
    if (idx[k] < 0 || idx[k] >= size) return idx[k];
  return std::nullopt;
}

// Visits every position of `shape` in row-major order, calling f(k, offsets) where offsets[j] is
// the position's element offset under strides[j].
template <size_t N, class F>
void walk(const Shape& shape, const std::array<Strides, N>& strides, F&& f) {
  const auto nd = static_cast<int64_t>(shape.size());
  const int64_t numel = numel_of(shape);
  std::vector<int64_t> at(shape.size(), 0);
  std::array<int64_t, N> off{};
  for (int64_t k = 0; k < numel; ++k) {
    f(k, off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      const auto u = static_cast<size_t>(d);
      if (++at[u] < shape[u]) {
        for (size_t j = 0; j < N; ++j) off[j] += strides[j][u];
        break;
      }
      for (size_t j = 0; j < N; ++j) off[j] -= (shape[u] - 1) * strides[j][u];
      at[u] = 0;
    }
  }
}

// t's strides with `dim` zeroed: the walk then gives the offset of everything but the index.
Strides without_dim(const Tensor& t, int64_t dim) {
  Strides s = t.strides();
  if (!s.empty()) s[static_cast<size_t>(dim)] = 0;
  return s;
}

std::optional<int64_t> gather_cpu(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  const int64_t size = x.dim() ? x.size(dim) : 1, step = x.dim() ? x.stride(dim) : 0;
  if (auto bad = first_bad(idx, index.numel(), size)) return bad;
  dispatch_dtype(x.dtype(), [&]<class T>(TypeTag<T>) {
    const T* src = static_cast<const T*>(x.raw_data());
    T* dst = static_cast<T*>(out.raw_data());
    walk<1>(index.shape(), {without_dim(x, dim)},
            [&](int64_t k, const std::array<int64_t, 1>& o) { dst[k] = src[o[0] + idx[k] * step]; });
  });
  return std::nullopt;
}

template <class T>
T add_values(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return static_cast<T>(static_cast<acc_t<T>>(a) + static_cast<acc_t<T>>(b));
  }
}

std::optional<int64_t> scatter_add_cpu(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  const int64_t size = self.dim() ? self.size(dim) : 1, step = self.dim() ? self.stride(dim) : 0;
  if (auto bad = first_bad(idx, index.numel(), size)) return bad;
  dispatch_dtype(self.dtype(), [&]<class T>(TypeTag<T>) {
    T* dst = static_cast<T*>(self.raw_data());
    const T* from = static_cast<const T*>(src.raw_data());
    // Serial: several positions may add into one element.
    walk<2>(index.shape(), {without_dim(self, dim), src.strides()}, [&](int64_t k, const std::array<int64_t, 2>& o) {
      T& d = dst[o[0] + idx[k] * step];
      d = add_values(d, from[o[1]]);
    });
  });
  return std::nullopt;
}

std::optional<int64_t> index_select_cpu(const Tensor& out, const Tensor& x, const Tensor& index, const char*) {
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  const int64_t outer = out.shape()[0], m = out.shape()[1], inner = out.shape()[2], n = x.shape()[1];
  if (auto bad = first_bad(idx, m, n)) return bad;
  const auto esize = static_cast<int64_t>(element_size(x.dtype()));
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const int64_t row_bytes = inner * esize;
  if (row_bytes == 0) return std::nullopt;
  parallel_for(outer * m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const int64_t o = r / m, j = r % m;
                   std::memcpy(dst + r * row_bytes, src + (o * n + idx[j]) * row_bytes, static_cast<size_t>(row_bytes));
                 }
               });
  return std::nullopt;
}

std::optional<int64_t> index_add_cpu(const Tensor& self, const Tensor& index, const Tensor& src) {
  const int64_t* idx = static_cast<const int64_t*>(index.raw_data());
  const int64_t outer = self.shape()[0], n = self.shape()[1], inner = self.shape()[2], m = src.shape()[1];
  if (auto bad = first_bad(idx, m, n)) return bad;
  dispatch_dtype(self.dtype(), [&]<class T>(TypeTag<T>) {
    T* dst = static_cast<T*>(self.raw_data());
    const T* from = static_cast<const T*>(src.raw_data());
    // Parallel over `outer` only: repeated indices add into the same row, so j stays serial.
    parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(m * inner, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o)
                     for (int64_t j = 0; j < m; ++j) {
                       T* row = dst + (o * n + idx[j]) * inner;
                       const T* add = from + (o * m + j) * inner;
                       for (int64_t i = 0; i < inner; ++i) row[i] = add_values(row[i], add[i]);
                     }
                 });
  });
  return std::nullopt;
}

void where_cpu(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), [&]<class T>(TypeTag<T>) {
    for_each_run<4>(out.shape(), {&out, &cond, &a, &b},
                    [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) {
                        const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
                        *reinterpret_cast<T*>(p[0] + i * s[0]) =
                            *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
                      }
                    });
  });
}

void clamp_cpu(const Tensor& out, const Tensor& in, std::optional<double> lo, std::optional<double> hi) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) {
    if constexpr (!std::is_same_v<T, bool>) {
      using A = std::conditional_t<std::is_integral_v<T>, T, acc_t<T>>;
      // Floats use +-inf as the missing bound, so infinite inputs pass through unchanged.
      constexpr A kLow = std::is_integral_v<A> ? std::numeric_limits<A>::lowest() : -std::numeric_limits<A>::infinity();
      constexpr A kHigh = std::is_integral_v<A> ? std::numeric_limits<A>::max() : std::numeric_limits<A>::infinity();
      const A l = lo ? static_cast<A>(*lo) : kLow;
      const A h = hi ? static_cast<A>(*hi) : kHigh;
      // max then min, as PyTorch: min > max gives max everywhere; NaN fails both tests and stays.
      unary_loop<T, T>(out, in, [l, h](T x) {
        A v = static_cast<A>(x);
        v = v < l ? l : v;
        return static_cast<T>(v > h ? h : v);
      });
    }
  });
}

}  // namespace

HG_REGISTER_KERNEL(gather_stub, kCPU, gather_cpu);
HG_REGISTER_KERNEL(scatter_add_stub, kCPU, scatter_add_cpu);
HG_REGISTER_KERNEL(index_select_stub, kCPU, index_select_cpu);
HG_REGISTER_KERNEL(index_add_stub, kCPU, index_add_cpu);
HG_REGISTER_KERNEL(where_stub, kCPU, where_cpu);
HG_REGISTER_KERNEL(clamp_stub, kCPU, clamp_cpu);

}  // namespace hg::cpu
