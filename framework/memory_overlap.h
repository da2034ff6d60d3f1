// Whether tensors share memory, decided from storage, offset, sizes and strides alone (no
// per-element work): what in-place ops check before they write, as PyTorch's MemOverlap.
#pragma once

#include <string_view>

#include "framework/tensor.h"

namespace hg {

// No: disjoint memory. Full: the same elements at the same places (a write of each element reads
// only itself). Partial: some memory is shared otherwise. TooHard: undecided within the search
// budget (only for layouts no view op makes); treated as No, as PyTorch does.
enum class MemOverlap { No, Full, Partial, TooHard };

// Whether two elements of t lie at the same address (an expanded view, or as_strided with
// strides that collide). No or Partial (yes), or TooHard.
MemOverlap internal_overlap(const Tensor& t);
// How `read` (broadcast to `written`'s shape where it has fewer or size-1 dims) overlaps
// `written`: Full only when every element of written is read from its own address.
MemOverlap overlap(const Tensor& written, const Tensor& read);

// "[op] ..." when t's own elements overlap, so a write into it is ambiguous.
void assert_no_internal_overlap(const Tensor& t, std::string_view op);
// "[op] ..." when read shares memory with written other than exactly (same offset and strides):
// an elementwise write would read values it already overwrote.
void assert_no_partial_overlap(const Tensor& written, const Tensor& read, std::string_view op);
// "[op] ..." when a and b share any memory at all (two outputs, or an output and an input that
// the op does not read elementwise).
void assert_no_overlap(const Tensor& a, const Tensor& b, std::string_view op);

}  // namespace hg
