// chunk/split/repeat/flip as compositions of public differentiable ops (slice, reshape, expand,
// index_select): no kernels of their own, and their gradients are those ops' gradients.
#include "framework/ops/shaping.h"

#include <numeric>

#include "framework/ops/copy.h"
#include "framework/ops/creation.h"
#include "framework/ops/indexing.h"
#include "framework/ops/views.h"

namespace hg {

std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  HG_CHECK(x.defined(), "split", "got an undefined tensor");
  HG_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  int64_t total = 0;
  for (int64_t s : sizes) {
    HG_CHECK(s >= 0, "split", "split sizes must be non-negative, got {}", sizes);
    HG_CHECK(!__builtin_add_overflow(total, s, &total), "split", "split sizes {} overflow 64-bit integers", sizes);
  }
  HG_CHECK(total == n, "split", "split sizes {} add up to {}, but dim {} of shape {} has size {}", sizes, total, d,
           x.shape(), n);
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return split_with_sizes(x, sizes, dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  HG_CHECK(x.defined(), "split", "got an undefined tensor");
  HG_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  HG_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split",
           "split_size must be positive, got {} for dim {} of shape {}", split_size, d, x.shape());
  if (n == 0) return {narrow(x, d, 0, 0)};
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  return split_with_sizes(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  HG_CHECK(x.defined(), "chunk", "got an undefined tensor");
  HG_CHECK(chunks > 0, "chunk", "chunks must be positive, got {}", chunks);
  HG_CHECK(x.dim() > 0, "chunk", "cannot chunk a 0-d tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  if (n == 0) return std::vector<Tensor>(static_cast<size_t>(chunks), narrow(x, d, 0, 0));  // as PyTorch
  return split(x, n / chunks + (n % chunks != 0), d);  // not (n + chunks - 1): overflows for huge chunks
}

Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats) {
  HG_CHECK(x.defined(), "repeat", "got an undefined tensor");
  HG_CHECK(static_cast<int64_t>(repeats.size()) >= x.dim(), "repeat",
           "got {} repeats {} for a tensor of {} dims (shape {}); give at least one per dim", repeats.size(), repeats,
           x.dim(), x.shape());
  for (int64_t r : repeats) HG_CHECK(r >= 0, "repeat", "repeats must be non-negative, got {}", repeats);
  const size_t lead = repeats.size() - static_cast<size_t>(x.dim());
  // [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then merged pairwise.
  Shape split_shape, expanded_shape, out_shape;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t s = i < lead ? 1 : x.shape()[i - lead];
    split_shape.insert(split_shape.end(), {1, s});
    expanded_shape.insert(expanded_shape.end(), {repeats[i], s});
    int64_t total = 0;
    HG_CHECK(!__builtin_mul_overflow(repeats[i], s, &total), "repeat", "repeats {} of shape {} overflow 64-bit sizes",
             repeats, x.shape());
    out_shape.push_back(total);
  }
  checked_numel(out_shape, "repeat", element_size(x.dtype()));
  return reshape(expand(reshape(x, split_shape), expanded_shape), out_shape);
}

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  HG_CHECK(x.defined(), "flip", "got an undefined tensor");
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), false);
  Tensor out = x;
  for (int64_t dim : dims) {
    const int64_t d = normalize_dim(dim, x.dim(), "flip");
    HG_CHECK(!seen[static_cast<size_t>(d)], "flip", "dim {} appears more than once in {}", d, dims);
    seen[static_cast<size_t>(d)] = true;
    if (x.dim() == 0 || x.size(d) <= 1) continue;
    const Tensor reversed = arange(static_cast<double>(x.size(d) - 1), -1.0, -1.0, TensorOptions(kInt64));
    out = index_select(out, d, reversed.to(x.device()));
  }
  return out.is_same(x) ? x.clone() : out;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return hg::chunk(*this, chunks, dim); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const { return hg::split(*this, split_size, dim); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  return hg::split_with_sizes(*this, sizes, dim);
}
Tensor Tensor::repeat(const std::vector<int64_t>& repeats) const { return hg::repeat(*this, repeats); }
Tensor Tensor::flip(const std::vector<int64_t>& dims) const { return hg::flip(*this, dims); }

}  // namespace hg
