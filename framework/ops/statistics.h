// Statistics over dims: var and std (with Bessel's correction, as PyTorch) and vector norms
// (p = 1, 2 or infinity). An empty dims list means every dim.
#pragma once

#include "framework/tensor.h"

namespace hg {

// Sum of squared deviations divided by max(N - correction, 0); unbiased=true is correction 1.
// (var(x, dims, 1.0, keepdim) takes a correction, var(x, dims, true, keepdim) the unbiased flag.
// There is no var(x, bool): var(x, {1}) would pick it, so the whole-tensor form is var(x) or
// var(x, {}, unbiased).)
Tensor var(const Tensor& x);
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased = true, bool keepdim = false);
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim = false);
// sqrt(var): a composite, so its gradient is var's through sqrt's. Next to `using namespace hg`,
// call it hg::std.
Tensor std(const Tensor& x);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim = false);
// p = 2: sqrt(sum x^2); p = 1: sum |x|; p = INFINITY: max |x|. Other p throw. The gradient at a
// zero norm is 0 (as PyTorch), and the infinity norm shares it evenly among tied maxima.
Tensor norm(const Tensor& x, double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false);

}  // namespace hg
