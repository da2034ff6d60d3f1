// cross_entropy_fused_ on the CPU in one pass per row: the row converted once into a float
// buffer (16 lanes at a time for bfloat16/float16), its max, exponentials and log-sum-exp there,
// and the gradient written back over the row in its dtype. cross_entropy's own kernels convert
// element by element and read each row three times, which made the loss of bf16 GPT-2 logits
// take a fifth of a CPU training step.
#include <cmath>
#include <vector>

#include "framework/ops/loss_fused_kernels.h"
#include "kernels/cpu/class_targets.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/simd/convert.h"

namespace hg::cpu {
namespace {

// Rows of ld values of which the first c are classes; the padding after them gets gradient 0.
template <class T, class C>
void fused_rows(C* loss, T* x, const int64_t* target, int64_t n, int64_t c, int64_t ld, int64_t ignore, C eps, C w,
                bool write_grad, BadTarget& bad) {
  const C keep = C(1) - eps, spread = eps / static_cast<C>(c);
  for_each_row(n, ld, 1, [&](int64_t r, int64_t base, auto) {
    T* row = x + base;
    const int64_t t = target[r];
    if (write_grad)
      for (int64_t i = c; i < ld; ++i) row[i] = T(0);
    if (t == ignore || t < 0 || t >= c) {
      if (t != ignore) bad.note(r);
      loss[r] = C(0);
      if (write_grad)
        for (int64_t i = 0; i < c; ++i) row[i] = T(0);
      return;
    }
    thread_local std::vector<C> buffer;
    buffer.resize(static_cast<size_t>(c));
    C* v = buffer.data();
    load_run(row, v, c);
    const C picked = v[t];
    C total = 0;
    if (eps != C(0))
      for (int64_t i = 0; i < c; ++i) total += v[i];
    const C m = row_max<C>(v, c, std::integral_constant<int64_t, 1>{});
    const C sum = exp_shifted(v, m, c);  // v now holds exp(x - m)
    const C lse = m + std::log(sum);
    C l = lse - picked;
    if (eps != C(0)) l = keep * l + eps * (lse - total / static_cast<C>(c));
    loss[r] = l;
    if (!write_grad) return;
    const C scale = w / sum, shift = spread * w;
    for (int64_t i = 0; i < c; ++i) v[i] = v[i] * scale - shift;
    v[t] -= keep * w;
    store_run(v, row, c);
  });
}

void cross_entropy_fused_cpu(const Tensor& losses, const Tensor& count, const Tensor& logits, const Tensor& target_t,
                             int64_t classes, int64_t ignore_index, double label_smoothing, bool mean,
                             bool write_grad) {
  const int64_t n = logits.shape()[0], ld = logits.shape()[1], c = classes;
  const auto* target = static_cast<const int64_t*>(target_t.raw_data());
  // Counted before the rows, so the mean's 1 / count goes into the one pass.
  const int64_t kept = count_kept(count, target, n, ignore_index);
  BadTarget bad;
  dispatch_float(logits.dtype(), [&]<class T>(TypeTag<T>) {
    dispatch_float(losses.dtype(), [&]<class C>(TypeTag<C>) {
      if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
        if constexpr (std::is_same_v<C, double> == std::is_same_v<T, double>) {
          const C w = mean ? C(1) / static_cast<C>(kept) : C(1);
          fused_rows<T, C>(static_cast<C*>(losses.raw_data()), static_cast<T*>(logits.raw_data()), target, n, c, ld,
                           ignore_index, static_cast<C>(label_smoothing), w, write_grad, bad);
        }
      }
    });
  });
  bad.check("cross_entropy", target, c);
}

}  // namespace

HG_REGISTER_KERNEL(cross_entropy_fused_stub, kCPU, cross_entropy_fused_cpu);

}  // namespace hg::cpu
