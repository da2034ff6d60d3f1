// Multi-tensor SGD and Adam/AdamW: one launch updates a list of parameters. The launch walks a
// table of (tensor, chunk) blocks passed by value, each block updating one chunk of one tensor
// with 16-byte vector loads and stores where every operand is aligned (a scalar tail after), so
// a step costs a launch per list instead of one per parameter. The hyper-parameters are read
// from the group's float64 tensor on the device, and the per-element rules are optim.cu's
// (optim_rules.cuh), so both paths give the same bits.
#include <array>
#include <type_traits>
#include <vector>

#include "framework/dispatch.h"
#include "framework/ops/optim_update_kernels.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/cuda/optim_rules.cuh"

namespace hg::cuda {
namespace {

using optim::AdamHyper;
using optim::SgdHyper;

// Table sizes keep the kernel's by-value argument under the 4 KB every CUDA version accepts.
constexpr int kMtTensors = 24;
constexpr int kMtBlocks = 320;
constexpr int64_t kMtChunk = 65536;  // values a block updates

// kDepth operand pointers per tensor (param, grad, state...), its flag (SGD's ready, Adam's
// step), its warm cast output (or null) and size; per block, its tensor and chunk.
template <int kDepth>
struct MtTable {
  void* ptr[kDepth][kMtTensors];
  void* flag[kMtTensors];
  void* cast[kMtTensors];
  int64_t numel[kMtTensors];
  unsigned char tensor_of[kMtBlocks];
  int32_t chunk_of[kMtBlocks];
};

// One parameter's operands as the host collects them.
template <int kDepth>
struct MtEntry {
  std::array<void*, kDepth> ptr;
  void* flag;
  void* cast;
  int64_t numel;
};

// Fills tables from `entries` and calls launch(table, blocks) for each full one and the last.
// A tensor whose chunks do not all fit continues in the next table.
template <int kDepth, class Launch>
void launch_tables(const std::vector<MtEntry<kDepth>>& entries, Launch&& launch) {
  MtTable<kDepth> table{};
  int tensors = 0, blocks = 0;
  auto put = [&](const MtEntry<kDepth>& e, int slot) {
    for (int d = 0; d < kDepth; ++d) table.ptr[d][slot] = e.ptr[d];
    table.flag[slot] = e.flag;
    table.cast[slot] = e.cast;
    table.numel[slot] = e.numel;
  };
  for (const MtEntry<kDepth>& e : entries) {
    if (e.numel == 0) continue;
    put(e, tensors++);
    const int64_t chunks = (e.numel + kMtChunk - 1) / kMtChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      table.tensor_of[blocks] = static_cast<unsigned char>(tensors - 1);
      table.chunk_of[blocks] = static_cast<int32_t>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == kMtBlocks || (tensors == kMtTensors && last_chunk)) {
        launch(table, blocks);
        blocks = 0;
        tensors = 0;
        if (!last_chunk) put(e, tensors++);  // the rest of this tensor opens the next table
      }
    }
  }
  if (blocks > 0) launch(table, blocks);
}

// 16 bytes of T (8 float16s, 4 floats, 2 doubles), and the matching number of C values.
template <class T, int W>
struct alignas(sizeof(T) * W) MtPack {
  T v[W];
};

__device__ __forceinline__ bool mt_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The part of a block's chunk: its operand pointers offset to the chunk, and its length.
struct MtChunk {
  int t;
  int64_t start, n;
};
template <int kDepth>
__device__ __forceinline__ MtChunk mt_chunk(const MtTable<kDepth>& tab) {
  const int t = tab.tensor_of[blockIdx.x];
  const int64_t start = static_cast<int64_t>(tab.chunk_of[blockIdx.x]) * kMtChunk;
  const int64_t left = tab.numel[t] - start;
  return {t, start, left < kMtChunk ? left : kMtChunk};
}

// A skipped step leaves the parameters as they are; the warm casts still get their values.
template <class C>
__device__ __forceinline__ void mt_cast_unchanged(const float* param, C* cast, int64_t n) {
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) cast[j] = from_acc<C>(param[j]);
}

// Runs one(j, pack...) over a chunk: vector groups of W when `vector`, scalar values otherwise
// and for the tail. body(k, W) handles values [k*W, k*W + W) from packs; scalar(j) one value.
template <int W, class Body, class Scalar>
__device__ __forceinline__ void mt_walk(int64_t n, bool vector, Body&& body, Scalar&& scalar) {
  int64_t first_scalar = 0;
  if (vector) {
    const int64_t groups = n / W;
    for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) body(k);
    first_scalar = groups * W;
  }
  for (int64_t j = first_scalar + threadIdx.x; j < n; j += blockDim.x) scalar(j);
}

template <class T, class C>
__global__ void sgd_multi_kernel(MtTable<3> tab, const double* hyper, const float* skip, bool nesterov) {
  constexpr int W = static_cast<int>(16 / sizeof(T));
  using CT = std::conditional_t<std::is_void_v<C>, unsigned char, C>;  // a placeholder without a cast
  const MtChunk ch = mt_chunk(tab);
  T* param = static_cast<T*>(tab.ptr[0][ch.t]) + ch.start;
  const T* grad = static_cast<const T*>(tab.ptr[1][ch.t]) + ch.start;
  T* buf = tab.ptr[2][ch.t] != nullptr ? static_cast<T*>(tab.ptr[2][ch.t]) + ch.start : nullptr;
  CT* cast = tab.cast[ch.t] != nullptr ? static_cast<CT*>(tab.cast[ch.t]) + ch.start : nullptr;
  if (optim_skipped(skip)) {
    if constexpr (std::is_same_v<T, float> && !std::is_void_v<C>) mt_cast_unchanged(param, cast, ch.n);
    return;
  }
  const SgdHyper h{hyper[optim::kSgdLr], hyper[optim::kSgdMomentum], hyper[optim::kSgdDampening],
                   hyper[optim::kSgdWeightDecay], nesterov};
  const bool first = buf != nullptr && *static_cast<const int32_t*>(tab.flag[ch.t]) == 0;
  const bool vector = mt_aligned(param, 16) && mt_aligned(grad, 16) && (buf == nullptr || mt_aligned(buf, 16)) &&
                      (std::is_void_v<C> || mt_aligned(cast, sizeof(CT) * W));
  mt_walk<W>(
      ch.n, vector,
      [&](int64_t k) {
        MtPack<T, W> p = reinterpret_cast<const MtPack<T, W>*>(param)[k];
        const MtPack<T, W> g = reinterpret_cast<const MtPack<T, W>*>(grad)[k];
        MtPack<T, W> b;
        if (buf != nullptr) b = reinterpret_cast<const MtPack<T, W>*>(buf)[k];
        MtPack<CT, W> c;
#pragma unroll
        for (int l = 0; l < W; ++l) {
          const acc_t<T> updated =
              sgd_value<T>(to_acc(p.v[l]), to_acc(g.v[l]), buf != nullptr ? &b.v[l] : nullptr, first, h);
          p.v[l] = from_acc<T>(updated);
          if constexpr (!std::is_void_v<C>) c.v[l] = optim_cast_value<T, C>(updated);
        }
        reinterpret_cast<MtPack<T, W>*>(param)[k] = p;
        if (buf != nullptr) reinterpret_cast<MtPack<T, W>*>(buf)[k] = b;
        if constexpr (!std::is_void_v<C>) reinterpret_cast<MtPack<CT, W>*>(cast)[k] = c;
      },
      [&](int64_t j) {
        const acc_t<T> updated =
            sgd_value<T>(to_acc(param[j]), to_acc(grad[j]), buf != nullptr ? buf + j : nullptr, first, h);
        param[j] = from_acc<T>(updated);
        if constexpr (!std::is_void_v<C>) cast[j] = optim_cast_value<T, C>(updated);
      });
}

template <class T, class C>
__global__ void adam_multi_kernel(MtTable<5> tab, const double* hyper, const float* skip, bool decoupled) {
  constexpr int W = static_cast<int>(16 / sizeof(T));
  using CT = std::conditional_t<std::is_void_v<C>, unsigned char, C>;
  const MtChunk ch = mt_chunk(tab);
  T* param = static_cast<T*>(tab.ptr[0][ch.t]) + ch.start;
  const T* grad = static_cast<const T*>(tab.ptr[1][ch.t]) + ch.start;
  T* m = static_cast<T*>(tab.ptr[2][ch.t]) + ch.start;
  T* v = static_cast<T*>(tab.ptr[3][ch.t]) + ch.start;
  T* vmax = tab.ptr[4][ch.t] != nullptr ? static_cast<T*>(tab.ptr[4][ch.t]) + ch.start : nullptr;
  CT* cast = tab.cast[ch.t] != nullptr ? static_cast<CT*>(tab.cast[ch.t]) + ch.start : nullptr;
  if (optim_skipped(skip)) {
    if constexpr (std::is_same_v<T, float> && !std::is_void_v<C>) mt_cast_unchanged(param, cast, ch.n);
    return;
  }
  const AdamHyper h{hyper[optim::kAdamLr],  hyper[optim::kAdamBeta1],       hyper[optim::kAdamBeta2],
                    hyper[optim::kAdamEps], hyper[optim::kAdamWeightDecay], decoupled,
                    vmax != nullptr};
  // The step was advanced by adam_multi_steps_kernel, queued before this launch.
  const AdamStepCoeffs<acc_t<T>> coeffs(h, *static_cast<const int64_t*>(tab.flag[ch.t]));
  const bool vector = mt_aligned(param, 16) && mt_aligned(grad, 16) && mt_aligned(m, 16) && mt_aligned(v, 16) &&
                      (vmax == nullptr || mt_aligned(vmax, 16)) &&
                      (std::is_void_v<C> || mt_aligned(cast, sizeof(CT) * W));
  using P = MtPack<T, W>;
  mt_walk<W>(
      ch.n, vector,
      [&](int64_t k) {
        P p = reinterpret_cast<const P*>(param)[k];
        const P g = reinterpret_cast<const P*>(grad)[k];
        P pm = reinterpret_cast<const P*>(m)[k], pv = reinterpret_cast<const P*>(v)[k], pmax;
        if (vmax != nullptr) pmax = reinterpret_cast<const P*>(vmax)[k];
        MtPack<CT, W> c;
#pragma unroll
        for (int l = 0; l < W; ++l) {
          const acc_t<T> updated = adam_value<T>(to_acc(p.v[l]), to_acc(g.v[l]), pm.v[l], pv.v[l],
                                                 vmax != nullptr ? &pmax.v[l] : nullptr, coeffs);
          p.v[l] = from_acc<T>(updated);
          if constexpr (!std::is_void_v<C>) c.v[l] = optim_cast_value<T, C>(updated);
        }
        reinterpret_cast<P*>(m)[k] = pm;
        reinterpret_cast<P*>(v)[k] = pv;
        if (vmax != nullptr) reinterpret_cast<P*>(vmax)[k] = pmax;
        reinterpret_cast<P*>(param)[k] = p;
        if constexpr (!std::is_void_v<C>) reinterpret_cast<MtPack<CT, W>*>(cast)[k] = c;
      },
      [&](int64_t j) {
        const acc_t<T> updated =
            adam_value<T>(to_acc(param[j]), to_acc(grad[j]), m[j], v[j], vmax != nullptr ? vmax + j : nullptr, coeffs);
        param[j] = from_acc<T>(updated);
        if constexpr (!std::is_void_v<C>) cast[j] = optim_cast_value<T, C>(updated);
      });
}

// Flags of a whole list in one launch: SGD's ready flags set, or Adam's steps advanced, unless
// the step is skipped. SGD's run after every update launch of the list (a tensor split over two
// tables must see "first" in both), Adam's before them.
struct MtFlags {
  void* flag[64];
  int count;
};
__global__ void sgd_multi_ready_kernel(MtFlags f, const float* skip) {
  if (!optim_skipped(skip) && static_cast<int>(threadIdx.x) < f.count) *static_cast<int32_t*>(f.flag[threadIdx.x]) = 1;
}
__global__ void adam_multi_steps_kernel(MtFlags f, const float* skip) {
  if (!optim_skipped(skip) && static_cast<int>(threadIdx.x) < f.count) *static_cast<int64_t*>(f.flag[threadIdx.x]) += 1;
}

template <class Kernel>
void launch_flags(const TensorList& flags, const float* skip, cudaStream_t stream, Kernel kernel) {
  MtFlags f{};
  for (size_t i = 0; i < flags.size(); ++i) {
    f.flag[f.count++] = flags[i].raw_data();
    if (f.count == 64 || i + 1 == flags.size()) {
      kernel<<<1, 64, 0, stream>>>(f, skip);
      HG_CUDA_CHECK_LAUNCH();
      f.count = 0;
    }
  }
}

// Calls f(TypeTag<C>, indices) for each kind of warm cast in the list (none, float16,
// bfloat16) that some parameter has: each kind is its own launch, its cast type a template.
template <class F>
void by_cast_kind(const TensorList& cast_outs, F&& f) {
  std::vector<size_t> none, half, bf16;
  for (size_t i = 0; i < cast_outs.size(); ++i)
    (!cast_outs[i].defined() ? none : cast_outs[i].dtype() == kFloat16 ? half : bf16).push_back(i);
  if (!none.empty()) f(TypeTag<void>{}, none);
  if (!half.empty()) f(TypeTag<Half>{}, half);
  if (!bf16.empty()) f(TypeTag<BFloat16>{}, bf16);
}

void* data_or_null(const TensorList& list, size_t i) { return list.empty() ? nullptr : list[i].raw_data(); }

void sgd_multi_update_cuda(const TensorList& params, const TensorList& grads, const TensorList& bufs,
                           const TensorList& ready, const Tensor& skip, const TensorList& cast_outs,
                           const Tensor& hyper, bool nesterov, float unscale_grad_by) {
  optim::check_multi_update("SGD", params, grads, {&bufs}, {{&ready, kInt32}}, cast_outs, skip, hyper,
                            optim::kSgdHyperSize);
  HG_CHECK(bufs.size() == ready.size(), "SGD", "momentum buffers and ready flags come together");
  HG_CHECK(unscale_grad_by == 0.0f, "SGD", "the unscale folded into the update is CPU-only");
  if (params.empty()) return;
  const int dev = params[0].device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const float* sk = skip.defined() ? skip.data_ptr<float>() : nullptr;
  dispatch_floating(params[0].dtype(), "SGD", [&]<class T>(TypeTag<T>) {
    by_cast_kind(cast_outs, [&]<class C>(TypeTag<C>, const std::vector<size_t>& which) {
      std::vector<MtEntry<3>> entries;
      for (size_t i : which)
        entries.push_back({{params[i].raw_data(), grads[i].raw_data(), data_or_null(bufs, i)},
                           data_or_null(ready, i),
                           cast_outs[i].defined() ? cast_outs[i].raw_data() : nullptr,
                           params[i].numel()});
      launch_tables<3>(entries, [&](const MtTable<3>& table, int blocks) {
        sgd_multi_kernel<T, C><<<blocks, kThreads, 0, stream>>>(table, hyper.data_ptr<double>(), sk, nesterov);
        HG_CUDA_CHECK_LAUNCH();
      });
    });
  });
  launch_flags(ready, sk, stream, sgd_multi_ready_kernel);
}

void adam_multi_update_cuda(const TensorList& params, const TensorList& grads, const TensorList& m, const TensorList& v,
                            const TensorList& vmax, const TensorList& steps, const Tensor& skip,
                            const TensorList& cast_outs, const Tensor& hyper, bool decoupled, float unscale_grad_by) {
  optim::check_multi_update("Adam", params, grads, {&m, &v, &vmax}, {{&steps, kInt64}}, cast_outs, skip, hyper,
                            optim::kAdamHyperSize);
  HG_CHECK(m.size() == params.size() && v.size() == params.size() && steps.size() == params.size(), "Adam",
           "every param needs exp_avg, exp_avg_sq and a step");
  HG_CHECK(unscale_grad_by == 0.0f, "Adam", "the unscale folded into the update is CPU-only");
  if (params.empty()) return;
  const int dev = params[0].device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  const float* sk = skip.defined() ? skip.data_ptr<float>() : nullptr;
  // The steps advance first (skipped steps do not count), then the updates read them.
  launch_flags(steps, sk, stream, adam_multi_steps_kernel);
  dispatch_floating(params[0].dtype(), "Adam", [&]<class T>(TypeTag<T>) {
    by_cast_kind(cast_outs, [&]<class C>(TypeTag<C>, const std::vector<size_t>& which) {
      std::vector<MtEntry<5>> entries;
      for (size_t i : which)
        entries.push_back(
            {{params[i].raw_data(), grads[i].raw_data(), m[i].raw_data(), v[i].raw_data(), data_or_null(vmax, i)},
             steps[i].raw_data(),
             cast_outs[i].defined() ? cast_outs[i].raw_data() : nullptr,
             params[i].numel()});
      launch_tables<5>(entries, [&](const MtTable<5>& table, int blocks) {
        adam_multi_kernel<T, C><<<blocks, kThreads, 0, stream>>>(table, hyper.data_ptr<double>(), sk, decoupled);
        HG_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace

HG_REGISTER_KERNEL(optim::sgd_multi_update_stub, kCUDA, sgd_multi_update_cuda);
HG_REGISTER_KERNEL(optim::adam_multi_update_stub, kCUDA, adam_multi_update_cuda);

}  // namespace hg::cuda
