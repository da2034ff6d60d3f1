// conv2d passes through cuDNN's legacy calls (cudnnConvolutionForward, ...BackwardData,
// ...BackwardFilter), used when HG_CUDNN_LEGACY_API=1 (see cudnn_conv.h). Descriptors are made
// on every call; the algorithm for each shape comes from the _v7 heuristic queries once and is
// cached. float32 runs with FMA math (no TF32) unless hg::set_allow_tf32(true), whatever math
// type the heuristic suggests; 16-bit types use tensor cores with float32 accumulation;
// hg::set_cudnn_deterministic(true) takes only algorithms cuDNN reports as deterministic.
#include <array>
#include <map>
#include <tuple>

#include "framework/cuda.h"
#include "framework/ops/creation.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/dnn/cudnn_conv.h"

namespace hg::cuda::dnn {
namespace {

int to_int(int64_t v) {
  HG_CHECK(v >= 0 && v <= INT32_MAX, "conv2d", "dimension {} is too large for cuDNN", v);
  return static_cast<int>(v);
}

// The descriptors' format: the op hands cuDNN all-NCHW or all-channels-last operands (a tensor
// with C == 1 or a 1x1 map is both, so the others decide).
cudnnTensorFormat_t layout_of(const Tensor& x, const Tensor& w, const Tensor& y) {
  return x.is_contiguous() && w.is_contiguous() && y.is_contiguous() ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(const Tensor& t, cudnnTensorFormat_t layout) {
    HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, layout, cudnn_dtype(t.dtype()), to_int(t.size(0)), to_int(t.size(1)),
                                              to_int(t.size(2)), to_int(t.size(3))));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const Tensor& w, cudnnTensorFormat_t layout) {  // [O, C/groups, kh, kw]
    HG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    HG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_dtype(w.dtype()), layout, to_int(w.size(0)), to_int(w.size(1)),
                                              to_int(w.size(2)), to_int(w.size(3))));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

cudnnMathType_t math_type(Dtype d) {
  if (d == kFloat16 || d == kBFloat16) return CUDNN_TENSOR_OP_MATH;
  if (d == kFloat32 && allow_tf32()) return CUDNN_DEFAULT_MATH;
  return CUDNN_FMA_MATH;
}

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const Conv2dParams& p, Dtype dtype) {
    HG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    HG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, to_int(p.padding[0]), to_int(p.padding[1]), to_int(p.stride[0]),
                                                   to_int(p.stride[1]), to_int(p.dilation[0]), to_int(p.dilation[1]),
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    HG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, to_int(p.groups)));
    HG_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math_type(dtype)));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Everything the algorithm choice depends on.
using AlgoKey = std::tuple<int, int, int, bool, bool, std::array<int64_t, 8>, int, std::array<int64_t, 7>>;
struct Algo {
  int algo;  // the cudnn*Algo_t of the pass
  cudnnMathType_t math;
};

std::map<AlgoKey, Algo>& algo_cache() {
  static std::map<AlgoKey, Algo> cache;
  return cache;
}

// The first heuristic choice that cuDNN reports as usable (and deterministic, under
// hg::set_cudnn_deterministic(true)); its math type is applied to conv, except for float32
// without TF32: the _v7 queries can return entries whose math type allows TF32
// (CUDNN_DEFAULT_MATH on sm_80+), so an FMA entry is preferred and, if there is none, the first
// usable algorithm runs with CUDNN_FMA_MATH forced (PyTorch asserts the same).
template <class Perf, class Query>
Algo choose(Query&& query, const char* what, Dtype dtype) {
  constexpr int kMax = 16;
  Perf perf[kMax];
  int returned = 0;
  HG_CUDNN_CHECK(query(kMax, &returned, perf));
  const bool deterministic = cudnn_deterministic();
  const auto usable = [&](const Perf& e) {
    return e.status == CUDNN_STATUS_SUCCESS && (!deterministic || e.determinism == CUDNN_DETERMINISTIC);
  };
  const bool fma_only = math_type(dtype) == CUDNN_FMA_MATH;
  if (fma_only) {
    for (int i = 0; i < returned; ++i)
      if (usable(perf[i]) && perf[i].mathType == CUDNN_FMA_MATH)
        return {static_cast<int>(perf[i].algo), CUDNN_FMA_MATH};
  }
  for (int i = 0; i < returned; ++i)
    if (usable(perf[i])) return {static_cast<int>(perf[i].algo), fma_only ? CUDNN_FMA_MATH : perf[i].mathType};
  fail("conv2d", "cuDNN found no {}{} algorithm for this convolution ({})", deterministic ? "deterministic " : "", what,
       dtype);
}

Tensor workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>(bytes)}, TensorOptions(kUInt8).device(device));
}

}  // namespace

void run_conv_legacy(ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  const int dev = x.device().index;
  const Dtype dtype = x.dtype();
  std::lock_guard lock(cudnn_mutex());
  cudnnHandle_t h = handle_for(dev);
  const cudnnTensorFormat_t layout = layout_of(x, w, y);
  TensorDesc xd(x, layout), yd(y, layout);
  FilterDesc wd(w, layout);
  ConvDesc cd(p, dtype);
  const AlgoKey key{static_cast<int>(pass),
                    static_cast<int>(dtype),
                    dev,
                    allow_tf32(),
                    cudnn_deterministic(),
                    {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(1), w.size(2), w.size(3)},
                    static_cast<int>(layout),
                    {p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups}};
  auto it = algo_cache().find(key);
  const float one = 1.0f, zero = 0.0f;
  size_t bytes = 0;
  switch (pass) {
    case ConvPass::Forward: {
      if (it == algo_cache().end()) {
        const Algo a = choose<cudnnConvolutionFwdAlgoPerf_t>(
            [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* perf) {
              return cudnnGetConvolutionForwardAlgorithm_v7(h, xd.d, wd.d, cd.d, yd.d, n, r, perf);
            },
            "forward", dtype);
        it = algo_cache().emplace(key, a).first;
      }
      const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(it->second.algo);
      HG_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, it->second.math));
      HG_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, xd.d, wd.d, cd.d, yd.d, algo, &bytes));
      const Tensor ws = workspace(bytes, x.device());
      HG_CUDNN_CHECK(cudnnConvolutionForward(h, &one, xd.d, x.raw_data(), wd.d, w.raw_data(), cd.d, algo,
                                             ws.defined() ? ws.raw_data() : nullptr, bytes, &zero, yd.d, y.raw_data()));
      return;
    }
    case ConvPass::BackwardData: {
      if (it == algo_cache().end()) {
        const Algo a = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
            [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
              return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd.d, yd.d, cd.d, xd.d, n, r, perf);
            },
            "backward-data", dtype);
        it = algo_cache().emplace(key, a).first;
      }
      const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(it->second.algo);
      HG_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, it->second.math));
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd.d, yd.d, cd.d, xd.d, algo, &bytes));
      const Tensor ws = workspace(bytes, x.device());
      HG_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, wd.d, w.raw_data(), yd.d, y.raw_data(), cd.d, algo,
                                                  ws.defined() ? ws.raw_data() : nullptr, bytes, &zero, xd.d,
                                                  x.raw_data()));
      return;
    }
    case ConvPass::BackwardFilter: {
      if (it == algo_cache().end()) {
        const Algo a = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
            [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd.d, yd.d, cd.d, wd.d, n, r, perf);
            },
            "backward-filter", dtype);
        it = algo_cache().emplace(key, a).first;
      }
      const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(it->second.algo);
      HG_CUDNN_CHECK(cudnnSetConvolutionMathType(cd.d, it->second.math));
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd.d, yd.d, cd.d, wd.d, algo, &bytes));
      const Tensor ws = workspace(bytes, x.device());
      HG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, xd.d, x.raw_data(), yd.d, y.raw_data(), cd.d, algo,
                                                    ws.defined() ? ws.raw_data() : nullptr, bytes, &zero, wd.d,
                                                    w.raw_data()));
      return;
    }
  }
}

}  // namespace hg::cuda::dnn
