// Creating tensors: empty/zeros/ones/full, arange, rand/randn with a global seed, from vectors.
#pragma once

#include <vector>

#include "framework/tensor.h"

namespace hg {

Tensor empty(const Shape& shape, TensorOptions options = {});
// An uninitialised tensor laid out in `format` (Contiguous or ChannelsLast, framework/shape.h), as
// torch.empty(..., memory_format=...).
Tensor empty(const Shape& shape, TensorOptions options, MemoryFormat format);
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// [start, end) in steps; integer dtype when all three are whole numbers and no dtype is given.
Tensor arange(double end, TensorOptions options = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end);
// Uniform in [0, 1) and standard normal, from the global generator.
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options = {});
// Uniform integers in [low, high), int64 by default.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = TensorOptions(kInt64));
// Seeds the global generator (rand, randn, randint, dropout, randperm).
void manual_seed(uint64_t seed);
uint64_t random_u64();  // next value of the global generator, for CPU kernels that need noise

// A tensor holding a copy of `values` (1-d, or with `shape`), in the dtype of T unless given.
template <class T>
Tensor tensor(const std::vector<T>& values, TensorOptions options = TensorOptions(dtype_of<T>));
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions options = TensorOptions(dtype_of<T>));
// A 0-d tensor.
Tensor scalar_tensor(double value, TensorOptions options = {});

}  // namespace hg
