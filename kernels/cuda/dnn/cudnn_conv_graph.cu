// conv2d passes through cuDNN's graph API, each with an execution plan built once per shape and
// cached, so a repeated call only fills a variant pack (three pointers and the workspace) and
// executes. Building a plan: tensor and convolution descriptors, a one-operation graph, the
// engine configurations cuDNN's heuristics rank (mode A, then the fallback list), and the first
// that is numerically acceptable and finalizes into a plan. Acceptable: never an engine that
// converts inputs down or reduces in reduced precision (the legacy calls accumulated in float32
// too), in float32 no tensor-core (TF32) engine unless hg::set_allow_tf32(true), and under
// hg::set_cudnn_deterministic(true) no engine cuDNN notes as non-deterministic. A shape with no
// acceptable engine is remembered and runs through the legacy calls (a fallback).
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "framework/cuda.h"
#include "framework/ops/creation.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/dnn/cudnn_conv.h"

namespace hg::cuda::dnn {
namespace {

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { HG_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // Attribute setters by value type; each checks the call.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    HG_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
  }
  void set_desc(cudnnBackendAttributeName_t name, const Desc& v) {
    cudnnBackendDescriptor_t raw = v.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void set_i64(cudnnBackendAttributeName_t name, const int64_t* v, int64_t n) { set(name, CUDNN_TYPE_INT64, n, v); }
  void finalize() { HG_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Unique ids of the three operands in every graph and variant pack.
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

// The largest power of two up to 16 that divides the address: plans are built for it.
int64_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int64_t al = 16;
  while (al > 1 && a % static_cast<std::uintptr_t>(al) != 0) al /= 2;
  return al;
}

Desc tensor_desc(const Tensor& t, int64_t uid, int64_t alignment) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t dtype = cudnn_dtype(t.dtype());
  const std::array<int64_t, 4> dims{t.size(0), t.size(1), t.size(2), t.size(3)};
  const std::array<int64_t, 4> strides{t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
  d.set_i64(CUDNN_ATTR_TENSOR_DIMENSIONS, dims.data(), 4);
  d.set_i64(CUDNN_ATTR_TENSOR_STRIDES, strides.data(), 4);
  d.set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, &uid, 1);
  d.set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &alignment, 1);
  d.finalize();
  return d;
}

Desc convolution_desc(const Conv2dParams& p) {
  Desc d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const std::array<int64_t, 2> dilation{p.dilation[0], p.dilation[1]}, stride{p.stride[0], p.stride[1]},
      padding{p.padding[0], p.padding[1]};
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  d.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  d.set_i64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &spatial, 1);
  d.set_i64(CUDNN_ATTR_CONVOLUTION_DILATIONS, dilation.data(), 2);
  d.set_i64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, stride.data(), 2);
  d.set_i64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, padding.data(), 2);
  d.set_i64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, padding.data(), 2);
  d.finalize();
  return d;
}

// The operation of a pass over the three tensors; groups follow from x's and w's channel counts.
Desc operation_desc(ConvPass pass, const Desc& x, const Desc& w, const Desc& y, const Desc& conv) {
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
  };
  const Names n = pass == ConvPass::Forward ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                                    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA}
                  : pass == ConvPass::BackwardData
                      ? Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA}
                      : Names{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  Desc op(n.type);
  const float alpha = 1.0f, beta = 0.0f;  // the pass overwrites its output
  op.set_desc(n.x, x);
  op.set_desc(n.w, w);
  op.set_desc(n.y, y);
  op.set_desc(n.conv, conv);
  op.set(n.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  op.set(n.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  op.finalize();
  return op;
}

// The numerical notes of a configuration's engine; nullopt when cuDNN cannot say.
std::optional<std::vector<cudnnBackendNumericalNote_t>> engine_notes(cudnnBackendDescriptor_t config) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &raw) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &count, notes.data()) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  notes.resize(static_cast<std::size_t>(count));
  return notes;
}

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t note) {
  return std::find(notes.begin(), notes.end(), note) != notes.end();
}

bool acceptable(const std::vector<cudnnBackendNumericalNote_t>& notes, Dtype dtype) {
  if (has_note(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
      has_note(notes, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
    return false;
  if (has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE) && dtype == kFloat32 && !allow_tf32()) return false;
  return !(has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) && cudnn_deterministic());
}

// A built plan and everything it was built from (kept alive beside it).
struct Plan {
  std::vector<Desc> parts;
  Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace_bytes = 0;
  bool nondeterministic = false;  // its engine adds in no fixed order (cuDNN's note)
};

// The first acceptable configuration that finalizes into a plan, or null.
std::unique_ptr<Plan> plan_from(cudnnHandle_t h, const Desc& graph, cudnnBackendHeurMode_t mode, Dtype dtype) {
  Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heuristics.get()) != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t available = 0;
  HG_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr));
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < available; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  HG_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned, raw.data()));
  for (int64_t i = 0; i < returned; ++i) {
    const auto notes = engine_notes(raw[i]);
    if (!notes || !acceptable(*notes, dtype)) continue;
    auto plan = std::make_unique<Plan>();
    plan->nondeterministic = has_note(*notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
    plan->plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    plan->plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
    if (cudnnBackendFinalize(plan->plan.get()) != CUDNN_STATUS_SUCCESS) continue;
    int64_t count = 0;
    HG_CUDNN_CHECK(cudnnBackendGetAttribute(plan->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &count, &plan->workspace_bytes));
    plan->parts.push_back(std::move(configs[static_cast<std::size_t>(i)]));
    return plan;
  }
  return nullptr;
}

// The plan of a pass, or null when no engine is acceptable (the caller falls back).
std::unique_ptr<Plan> build_plan(cudnnHandle_t h, ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y,
                                 const Conv2dParams& p, const std::array<int64_t, 3>& align) {
  std::vector<Desc> parts;
  parts.push_back(tensor_desc(x, kUidX, align[0]));
  parts.push_back(tensor_desc(w, kUidW, align[1]));
  parts.push_back(tensor_desc(y, kUidY, align[2]));
  parts.push_back(convolution_desc(p));
  parts.push_back(operation_desc(pass, parts[0], parts[1], parts[2], parts[3]));
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t op = parts[4].get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  graph.finalize();
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (auto plan = plan_from(h, graph, mode, x.dtype())) {
      for (Desc& d : parts) plan->parts.push_back(std::move(d));
      plan->parts.push_back(std::move(graph));
      return plan;
    }
  }
  return nullptr;
}

// Everything a plan depends on: pass, dtype, device, TF32, determinism, the shapes, the layout
// (contiguous NCHW or channels-last: the strides follow from it), stride/padding/dilation, and
// the operands' alignments.
using PlanKey = std::tuple<int, int, int, bool, bool, std::array<int64_t, 12>, bool, std::array<int64_t, 6>,
                           std::array<int64_t, 3>>;

std::map<PlanKey, std::unique_ptr<Plan>>& plans() {
  static std::map<PlanKey, std::unique_ptr<Plan>> cache;
  return cache;
}
std::atomic<std::size_t> executions{0}, fallbacks{0};

}  // namespace

bool run_conv_graph(ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  const int dev = x.device().index;
  const std::array<int64_t, 3> align{alignment_of(x.raw_data()), alignment_of(w.raw_data()),
                                     alignment_of(y.raw_data())};
  const PlanKey key{static_cast<int>(pass),
                    static_cast<int>(x.dtype()),
                    dev,
                    allow_tf32(),
                    cudnn_deterministic(),
                    {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(1), w.size(2), w.size(3), y.size(0),
                     y.size(1), y.size(2), y.size(3)},
                    !(x.is_contiguous() && w.is_contiguous() && y.is_contiguous()),
                    {p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1]},
                    align};
  std::lock_guard lock(cudnn_mutex());
  cudnnHandle_t h = handle_for(dev);
  auto it = plans().find(key);
  if (it == plans().end()) {
    it = plans().emplace(key, build_plan(h, pass, x, w, y, p, align)).first;
    if (!it->second) fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
  if (!it->second) return false;
  const Plan& plan = *it->second;

  const Tensor ws =
      plan.workspace_bytes > 0 ? empty({plan.workspace_bytes}, TensorOptions(kUInt8).device(x.device())) : Tensor();
  std::array<int64_t, 3> uids{kUidX, kUidW, kUidY};
  std::array<void*, 3> pointers{x.raw_data(), w.raw_data(), y.raw_data()};
  void* workspace = ws.defined() ? ws.raw_data() : nullptr;
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_i64(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids.data(), 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  HG_CUDNN_CHECK(cudnnBackendExecute(h, plan.plan.get(), pack.get()));
  executions.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::size_t conv_graph_plans_built() {
  std::lock_guard lock(cudnn_mutex());
  std::size_t n = 0;
  for (const auto& [key, plan] : plans()) n += plan ? 1 : 0;
  return n;
}

std::size_t conv_graph_nondeterministic_plans() {
  std::lock_guard lock(cudnn_mutex());
  std::size_t n = 0;
  for (const auto& [key, plan] : plans()) n += plan && plan->nondeterministic ? 1 : 0;
  return n;
}

std::size_t conv_graph_fallbacks() { return fallbacks.load(std::memory_order_relaxed); }

std::size_t conv_graph_executions() { return executions.load(std::memory_order_relaxed); }

}  // namespace hg::cuda::dnn
