// Kernel plumbing behind indexing.h: the kernel function types and dispatch stubs that kernels/cpu and
// kernels/cuda fill in. Internal: not installed, included by the op's .cpp and by kernels.
#pragma once

#include "framework/dispatch.h"
#include "framework/ops/indexing.h"

namespace hg {

// The CPU index kernels return the first index value outside [0, size of `dim`), if any, having
// written nothing they should not; the op turns it into an error naming itself. The CUDA kernels
// never wait for that verdict: they skip bad indices, return nullopt and report the first bad one
// through the device error record (kernels/cuda/runtime.h), raised at the next host synchronisation.
// out[p] = x[p with p[dim] = index[p]]: out and index contiguous, of index's shape.
using GatherFn = std::optional<int64_t> (*)(const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index);
HG_DECLARE_STUB(gather_stub, GatherFn);

// self[p with p[dim] = index[p]] += src[p] for every p of index's shape (self contiguous).
using ScatterAddFn = std::optional<int64_t> (*)(const Tensor& self, int64_t dim, const Tensor& index,
                                                const Tensor& src);
HG_DECLARE_STUB(scatter_add_stub, ScatterAddFn);

// out [outer, m, inner] = x [outer, n, inner] at rows index[0..m) (all contiguous). `op` (a string
// literal: index_select or embedding) names the caller in errors reported from the device.
using IndexSelectFn = std::optional<int64_t> (*)(const Tensor& out, const Tensor& x, const Tensor& index,
                                                 const char* op);
HG_DECLARE_STUB(index_select_stub, IndexSelectFn);

// self [outer, n, inner] rows index[j] += src [outer, m, inner] row j (all contiguous).
using IndexAddFn = std::optional<int64_t> (*)(const Tensor& self, const Tensor& index, const Tensor& src);
HG_DECLARE_STUB(index_add_stub, IndexAddFn);

// out = cond ? a : b, all of out's shape (broadcast views allowed); a, b and out share a dtype.
using WhereFn = void (*)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
HG_DECLARE_STUB(where_stub, WhereFn);

}  // namespace hg
