// libtorch-style indexing: x.index({Slice(1, None, 2), 0, "...", None}) and x.index_put_({...},
// value), with integers, slices, None (a new dim of size 1), Ellipsis / "..." and one int64 or
// bool index tensor.
#pragma once

#include <concepts>
#include <initializer_list>
#include <optional>
#include <vector>

#include "framework/tensor.h"

namespace hg::indexing {

// As in libtorch, None is the empty optional: a missing slice bound, or a new dim as an index.
inline constexpr std::nullopt_t None = std::nullopt;
struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};

// start:stop:step; a missing bound means the whole dim (step defaults to 1 and must be positive).
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  std::optional<int64_t> start, stop, step;
};

class TensorIndex {
 public:
  enum class Kind : uint8_t { None, Ellipsis, Integer, Slice, Tensor };
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}                     // NOLINT
  TensorIndex(EllipsisIndexType) : kind_(Kind::Ellipsis) {}              // NOLINT
  TensorIndex(const char* ellipsis);                                     // NOLINT: only "..."
  TensorIndex(Slice s) : kind_(Kind::Slice), slice_(s) {}                // NOLINT
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT
  template <std::integral T>
  requires(!std::same_as<T, bool>) TensorIndex(T i)
      : kind_(Kind::Integer), integer_(static_cast<int64_t>(i)) {}  // NOLINT
  TensorIndex(bool) = delete;  // a bool scalar index is not supported (use a bool tensor)

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace hg::indexing

namespace hg {

// x[indices]: integers select (dropping the dim), slices and Ellipsis keep dims as views, None
// adds a dim; one int64 tensor (negative entries count from the end) or bool mask picks along its
// dim(s) by copying (index_select), its result dims at that place, as PyTorch. Differentiable.
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
// x[indices] = value (broadcast; converted to x's dtype), in place. With a tensor index, repeated
// positions get the last value written.
Tensor& index_put_(Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& value);

}  // namespace hg
