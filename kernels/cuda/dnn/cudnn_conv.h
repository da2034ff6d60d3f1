// The cuDNN side of CUDA conv2d in float32, float16 and bfloat16 (conv.cu holds the rest: bias,
// float64, the registrations). Two ways to run one pass, picked per call by conv.cu:
//   - cudnn_conv_graph.cu (the default): cuDNN's graph API, one execution plan per shape, built
//     once and cached, so a repeated call only fills a variant pack and executes;
//   - cudnn_conv_legacy.cu (HG_CUDNN_LEGACY_API=1): the cudnnConvolution* calls with descriptors
//     made on every call and the algorithm cached. cuDNN 9 turns each such call into a graph and
//     plans it again, host work on every call; it stays for comparison (tools/gpu-conv-ab.sh)
//     and as a way around a graph-API problem on some cuDNN version.
#pragma once

#include <cudnn.h>

#include <mutex>

#include "framework/ops/conv_kernels.h"

namespace hg::cuda::dnn {

enum class ConvPass { Forward, BackwardData, BackwardFilter };

// One pass of conv2d. Operands are all contiguous NCHW or all channels-last (NHWC strides; the
// weight [O, C/groups, kh, kw] too) on one device and of one dtype: `x` the input, `w` the weight, `y` the output.
// Forward writes y from x and w, BackwardData writes x (the input's gradient) from y (the output's gradient) and w,
// BackwardFilter writes w (the weight's gradient) from x and y. Nothing is empty. The caller
// holds a DeviceGuard for the operands' device.
// run_conv_graph returns false, having done nothing, when cuDNN offers no acceptable engine for
// the pass (remembered per shape); the caller then runs the legacy calls.
bool run_conv_graph(ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p);
void run_conv_legacy(ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p);

// Shared by both paths: the mutex every call holds while it uses a handle (a handle is not safe to
// use from two threads at once), the device's handle bound to the device's stream (call with the
// mutex held), the cuDNN data type of a dtype, and whether HG_CUDNN_LEGACY_API=1 (read once).
std::mutex& cudnn_mutex();
cudnnHandle_t handle_for(int dev);
cudnnDataType_t cudnn_dtype(Dtype d);
bool use_legacy_api();

// The graph path's counters (conv_stats.h reports them): plans built, passes executed with
// them, shapes handed to the legacy calls, plans whose engine is non-deterministic.
std::size_t conv_graph_plans_built();
std::size_t conv_graph_executions();
std::size_t conv_graph_fallbacks();
std::size_t conv_graph_nondeterministic_plans();

}  // namespace hg::cuda::dnn
