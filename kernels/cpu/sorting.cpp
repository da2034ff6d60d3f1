// CPU sort/topk (a comparison sort of row positions, ties broken by position, so it is stable)
// and multinomial sampling (running sums for draws with replacement, Efraimidis-Spirakis keys
// without).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "framework/ops/categorical_kernels.h"
#include "framework/ops/sorting_kernels.h"
#include "kernels/cpu/loops.h"

namespace hg::cpu {
namespace {

// Sort keys: 16-bit floats compare as float; NaN is larger than every number.
template <class K>
bool key_less(K a, K b) {
  return a < b || (b != b && a == a);
}

template <class T>
void sort_typed(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending) {
  using K = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
  const int64_t rows = in.shape()[0], n = in.shape()[1], k = values.shape()[1];
  const T* src = static_cast<const T*>(in.raw_data());
  T* vals = static_cast<T*>(values.raw_data());
  int64_t* idx = static_cast<int64_t*>(indices.raw_data());
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::vector<K> keys(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      const T* row = src + r * n;
      for (int64_t i = 0; i < n; ++i) keys[static_cast<size_t>(i)] = static_cast<K>(row[i]);
      std::iota(order.begin(), order.end(), int64_t{0});
      auto before = [&](int64_t i, int64_t j) {
        const K a = keys[static_cast<size_t>(i)], c = keys[static_cast<size_t>(j)];
        if (descending ? key_less(c, a) : key_less(a, c)) return true;
        if (descending ? key_less(a, c) : key_less(c, a)) return false;
        return i < j;
      };
      if (k < n) {
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      } else {
        std::sort(order.begin(), order.end(), before);
      }
      for (int64_t j = 0; j < k; ++j) {
        const int64_t i = order[static_cast<size_t>(j)];
        vals[r * k + j] = row[i];
        idx[r * k + j] = i;
      }
    }
  });
}

void sort_cpu(const Tensor& values, const Tensor& indices, const Tensor& in, bool descending) {
  dispatch_dtype(in.dtype(), [&]<class T>(TypeTag<T>) { sort_typed<T>(values, indices, in, descending); });
}

template <class T>
void multinomial_typed(const Tensor& out, const Tensor& probs, const Tensor& uniforms, bool replacement) {
  const int64_t rows = probs.shape()[0], n = probs.shape()[1], s = out.shape()[1];
  const T* p = static_cast<const T*>(probs.raw_data());
  const double* u = static_cast<const double*>(uniforms.raw_data());
  int64_t* dst = static_cast<int64_t*>(out.raw_data());
  const int64_t m = uniforms.shape()[1];
  parallel_for(rows, 1, [&](int64_t b, int64_t e) {
    std::vector<double> w(static_cast<size_t>(n)), key(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      for (int64_t i = 0; i < n; ++i)
        w[static_cast<size_t>(i)] = static_cast<double>(static_cast<acc_t<T>>(p[r * n + i]));
      if (replacement) {
        double total = 0;
        int64_t last = 0;
        for (int64_t i = 0; i < n; ++i) {
          total += w[static_cast<size_t>(i)];
          if (w[static_cast<size_t>(i)] > 0) last = i;
        }
        for (int64_t j = 0; j < s; ++j) {
          const double target = u[r * m + j] * total;
          double acc = 0;
          int64_t pick = last;
          for (int64_t i = 0; i < n; ++i) {
            acc += w[static_cast<size_t>(i)];
            if (w[static_cast<size_t>(i)] > 0 && target < acc) {
              pick = i;
              break;
            }
          }
          dst[r * s + j] = pick;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const double wi = w[static_cast<size_t>(i)];
          key[static_cast<size_t>(i)] = wi > 0 ? std::log(1.0 - u[r * m + i]) / wi : -INFINITY;
        }
        std::iota(order.begin(), order.end(), int64_t{0});
        std::partial_sort(order.begin(), order.begin() + s, order.end(), [&](int64_t i, int64_t j) {
          const double a = key[static_cast<size_t>(i)], c = key[static_cast<size_t>(j)];
          return a > c || (a == c && i < j);
        });
        for (int64_t j = 0; j < s; ++j) dst[r * s + j] = order[static_cast<size_t>(j)];
      }
    }
  });
}

void multinomial_cpu(const Tensor& out, const Tensor& probs, const Tensor& uniforms, bool replacement) {
  dispatch_floating(probs.dtype(), "multinomial",
                    [&]<class T>(TypeTag<T>) { multinomial_typed<T>(out, probs, uniforms, replacement); });
}

}  // namespace

HG_REGISTER_KERNEL(sort_stub, kCPU, sort_cpu);
HG_REGISTER_KERNEL(multinomial_stub, kCPU, multinomial_cpu);

}  // namespace hg::cpu
