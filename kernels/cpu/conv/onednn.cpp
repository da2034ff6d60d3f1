#include "kernels/cpu/conv/onednn.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>

#include "framework/dispatch.h"
#include "framework/error.h"
#include "framework/half.h"
#include "framework/ops/creation.h"
#include "kernels/cpu/conv/filter_gemm.h"
#include "kernels/cpu/conv/pool_2x2.h"
#include "kernels/cpu/conv/relu_grad.h"
#include "kernels/cpu/conv/winograd_bf16.h"
#include "kernels/cpu/cpu_caps.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/simd/convert.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/workspace.h"

#if HG_HAVE_ONEDNN
#include "kernels/cpu/conv/layouts.h"
#include "kernels/cpu/conv/onednn_plan.h"
#include "kernels/cpu/onednn_common.h"
#endif

namespace hg::cpu {

#if HG_HAVE_ONEDNN
namespace {

using namespace onednn_conv;

// The calling thread's buffers (onednn_common.h's GrowBuffer: they only grow, so a training
// loop's steady state allocates nothing here).
struct ThreadBuffers {
  // in, out: activation passes; x, gy: filter; block: a pooled forward's result, gy_nchw: a pooled
  // backward's output gradient; wide_in, wide_x, wide_out: float16 chunks in float32 (widened).
  GrowBuffer in, out, x, gy, scratch, weights, bias, block, gy_nchw, wide_in, wide_x, wide_out;
};
ThreadBuffers& thread_buffers() {
  thread_local ThreadBuffers b;
  return b;
}

// Float16 convolutions run on the float32 primitives (no float16 arithmetic on the CPUs these
// serve, and oneDNN 2.6's float16 reorders are reference loops, 100x slower than convert.h's):
// each chunk a primitive reads is widened into a per-thread buffer first, and each result it
// writes is rounded back once, to nearest even, while still in cache.
bool widened(Dtype dtype) { return dtype == kFloat16; }

// `count` values at `user` in `dtype` (float32 or float16) as float32: `user` itself, or a widened
// copy in `buf`.
const float* as_float32(Dtype dtype, const char* user, int64_t count, GrowBuffer& buf) {
  if (!widened(dtype)) return reinterpret_cast<const float*>(user);
  float* wide = reinterpret_cast<float*>(buf.sized(static_cast<size_t>(count) * sizeof(float)));
  load_run(reinterpret_cast<const Half*>(user), wide, count);
  return wide;
}

// The float32 values a plan reads through `desc` (halfgrad's layout, float32), as above.
const char* as_float32(Dtype dtype, const char* user, const memory::desc& desc, GrowBuffer& buf) {
  return reinterpret_cast<const char*>(
      as_float32(dtype, user, static_cast<int64_t>(desc.get_size() / sizeof(float)), buf));
}

// A small tensor (weights, bias) as float32: its own data, or for float16 a widened copy in `buf`.
const void* as_float32(const Tensor& t, std::vector<float>& buf) {
  if (!widened(t.dtype())) return t.raw_data();
  buf.resize(static_cast<size_t>(t.numel()));
  load_run(static_cast<const Half*>(t.raw_data()), buf.data(), t.numel());
  return buf.data();
}

// The weights in each plan's layout: reordered once per call (per distinct layout) on the calling
// thread, then read by every chunk; bfloat16 weights packed by conv/layouts.h where it takes
// the layout (oneDNN's reorder otherwise). The buffers come from the caching allocator: a fresh
// zero-filled vector per call cost a page fault per 4 KiB of every layer's weights each step.
struct PreparedWeights {
  std::optional<Workspace<char>> full, last;
  const void* of(const ChunkPlans& plans, const Chunks& c, int64_t i) const {
    return i == c.count - 1 && plans.last != plans.full ? last->data() : full->data();
  }
};
void prepare_weights(const ChunkPlans& plans, const Tensor& weight, PreparedWeights& w) {
  const dnnl::engine& engine = cpu_engine();
  std::vector<float> wide;
  const void* user = as_float32(weight, wide);
  const auto reorder_into = [&](const Plan& plan, std::optional<Workspace<char>>& buf) {
    buf.emplace(static_cast<int64_t>(plan.weights_prim.get_size()));
    if (weight.dtype() == kBFloat16 &&
        pack_bf16_weights(static_cast<const uint16_t*>(user), plan.weights_ohwi, plan.weights_prim, buf->data()))
      return;
    memory src(plan.weights_user, engine, const_cast<void*>(user));
    memory dst(plan.weights_prim, engine, buf->data());
    plan.weights_reorder.execute(thread_stream(), src, dst);
  };
  const OneOpenMPThread one_thread;
  reorder_into(*plans.full, w.full);
  if (plans.last != plans.full) reorder_into(*plans.last, w.last);
  thread_stream().wait();
}

// An activation reorder between halfgrad's layout (NCHW or NHWC) and a primitive's: conv/layouts.h's
// transposition where it takes the pair of layouts, else oneDNN's reorder.
void move_activations(const dnnl::reorder& reorder, dnnl::stream& s, memory& from, memory& to) {
  if (!transpose_activations(from.get_desc(), to.get_desc(), from.get_data_handle(), to.get_data_handle()))
    reorder.execute(s, from, to);
}

void run_or_fail(const char* what, const std::function<void()>& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    fail("conv2d", "oneDNN {} failed: {}", what, e.what());
  }
}

// Whether float32 convolutions run on the primitives: by default where oneDNN's float32 kernels
// are AVX-512 ones: on the Zen 4 they beat the im2col path on the MNIST CNN's fused second layer,
// forward and backward (figures in docs/history/PERF-CPU.md, 2026-11-27). Elsewhere (AVX2) that
// was never measured, and im2col stays. HG_CPU_ONEDNN_CONV=float32 or =im2col picks either way.
// float16 follows float32: the same primitives, its chunks widened (`widened`).
bool float32_on_primitives() {
  static const bool on = [] {
    const char* env = std::getenv("HG_CPU_ONEDNN_CONV");
    if (env != nullptr && std::string(env) == "float32") return true;
    if (env != nullptr && std::string(env) == "im2col") return false;
    return cpu_caps().avx512;
  }();
  return on;
}

// bfloat16 wherever this CPU has bfloat16 units, float32 and float16 where float32_on_primitives
// says so; HG_CPU_ONEDNN=0 turns them all off.
bool applies(const Tensor& t) {
  if (t.numel() == 0) return false;
  const CpuCaps& caps = cpu_caps();
  if (t.dtype() == kBFloat16) return caps.onednn && caps.native_bf16();
  return (t.dtype() == kFloat32 || t.dtype() == kFloat16) && float32_on_primitives() && caps.onednn;
}

// A forward pass whose products are at most this deep (input channels per group x kernel
// height x width: an image network's first layer with a 3x3 kernel, 9 or 27) runs on conv.cpp's
// own path. With so short a product its time is writing the output, which the primitive does
// channels-last and then reorders to NCHW; conv.cpp writes NCHW directly. On the Zen 4 (bf16) its
// own path was faster up to depth 36; from about 50 on the two were even, and a 3-channel 7x7
// kernel was faster on the primitive, as it will be more so on AMX (figures in
// docs/history/PERF-CPU.md, 2026-11-26 22:20). The weight-gradient pass stays on the primitives,
// which were faster for these shapes.
constexpr int64_t kForwardOwnPathDepth = 36;
// (Channels-last activations stay on the primitive, which writes NHWC itself.)
bool forward_on_own_path(const Problem& pr) {
  return !pr.nhwc && pr.c / pr.groups * pr.kh * pr.kw <= kForwardOwnPathDepth;
}

// bfloat16 3x3 layers where conv/algorithm.h chooses Winograd run on conv/winograd_bf16.h
// instead of the primitives: the forward and weight gradient (c -> o channels) or the input
// gradient (o -> c).
bool on_winograd_bf16(const Problem& pr, ConvPass pass) {
  const bool swapped = pass == ConvPass::InputGradient;
  return pr.dt == kBf16 && conv_algorithm(pr.shape(), pass) == ConvAlgorithm::Winograd && winograd_bf16_available() &&
         winograd_bf16_takes(swapped ? pr.o : pr.c, swapped ? pr.c : pr.o, pr.oh, pr.ow, pr.nhwc);
}

// The transformed filter of a Winograd pass (conv/winograd_bf16.h), made once per call.
struct WinogradFilter {
  Workspace<BFloat16> u;
  WinogradFilter(const Tensor& weight, const Problem& pr, bool input_gradient)
      : u(winograd_bf16_weights_count(pr.c, pr.o)) {
    winograd_bf16_weights(static_cast<const BFloat16*>(weight.raw_data()), pr.ohwi, pr.o, pr.c, input_gradient,
                          u.data());
  }
};

// Where chunk i's samples of t start.
char* chunk_start(const Tensor& t, const Chunks& chunks, int64_t i) {
  const int64_t sample_bytes = t.numel() / t.size(0) * static_cast<int64_t>(element_size(t.dtype()));
  return static_cast<char*>(const_cast<void*>(t.raw_data())) + i * chunks.per * sample_bytes;
}

// conv2d_relu's ReLU over `count` values at `start`, right after they were written (still in
// cache), by relu_in_place (loops.h). (oneDNN's ReLU post-op was tried: it turns NaN into 0,
// which would hide an overflow from the GradScaler.)
void relu_block(Dtype dtype, char* start, int64_t count) {
  dispatch_floating(dtype, "conv2d", [&]<class T>(TypeTag<T>) { relu_in_place(reinterpret_cast<T*>(start), count); });
}

// conv2d_relu_max_pool2d's outputs: each chunk's result goes to a per-thread buffer and is pooled
// from there into these (pool_2x2.h), so the convolution's whole output is never written.
struct PoolInto {
  char* values;    // [N, O, OH/2, OW/2], the input's dtype
  uint8_t* which;  // the same shape: each window's choice, 0..3
};
void pool_block(Dtype dtype, const char* block, const PoolInto& into, int64_t first_plane, int64_t planes, int64_t h,
                int64_t w) {
  const int64_t offset = first_plane * (h / 2) * (w / 2);
  uint8_t* codes = into.which + offset;
  dispatch_floating(dtype, "conv2d", [&]<class T>(TypeTag<T>) {
    max_pool_2x2_codes_planes(reinterpret_cast<const T*>(block), reinterpret_cast<T*>(into.values) + offset, codes,
                              planes, h, w);
  });
}

// What runs after each chunk of an activation pass, on the same thread: chunk i, the chunk's
// input as the primitive read it (in its layout), and the same values in halfgrad's layout, float32 (float16
// chunks widened).
using AfterChunk = std::function<void(int64_t, const memory&, const char*)>;
// Where an activation pass reads chunk i's input (halfgrad's layout), made on the calling thread; by default
// the chunk's samples of the `in` tensor.
using ChunkSource = std::function<const char*(int64_t)>;

// conv2d_relu_max_pool2d: each chunk's result is at most this big, so it stays in the core's
// cache between the primitive and the pool (forward), or between its making from the pooled
// gradient and the primitives that read it (backward), counted in the primitives' dtype.
constexpr int64_t kPooledChunkBytes = int64_t{1} << 19;
Chunks pooled_chunks(const Problem& pr) {
  const int64_t sample_bytes = pr.o * pr.oh * pr.ow * (pr.dt == kBf16 ? 2 : 4);
  return chunks_for(pr.n, std::max<int64_t>(1, kPooledChunkBytes / std::max<int64_t>(sample_bytes, 1)));
}

// The forward and input-gradient passes: per chunk, `in` reordered to the primitive's layout, the
// primitive (in_arg to out_arg, with the weights and, when defined, the bias), and its result
// reordered back into `out` (then conv2d_relu's ReLU over it when `relu`). With `pool`, the result
// goes to a per-thread buffer instead, ReLU'd and pooled from there (out is not written). Then
// `after`, when given. With `source`, the chunks' input comes from it instead of `in`. Float16
// chunks are widened before the reorder and rounded after it (`widened`).
void run_activation_pass(const ChunkPlans& plans, const Chunks& chunks, const Tensor& weight, const Tensor& in,
                         int in_arg, const Tensor& out, int out_arg, const Tensor& bias, bool relu,
                         const PoolInto* pool = nullptr, const AfterChunk& after = {}, const ChunkSource& source = {}) {
  const Dtype dtype = weight.dtype();
  PreparedWeights w;
  prepare_weights(plans, weight, w);
  std::vector<float> wide_bias;
  const void* bias_values = bias.defined() ? as_float32(bias, wide_bias) : nullptr;
  run_parallel(chunks.count, [&](int64_t i) {
    const Plan& plan = plans.of(chunks, i);
    const dnnl::engine& engine = cpu_engine();
    const OneOpenMPThread one_thread;
    ThreadBuffers& b = thread_buffers();
    dnnl::stream& s = thread_stream();
    const memory::dims dims = plan.out_user.dims();  // [samples, channels, h, w]
    const int64_t count = dims[0] * dims[1] * dims[2] * dims[3];
    char* result =
        pool != nullptr ? b.block.sized(static_cast<size_t>(count) * element_size(dtype)) : chunk_start(out, chunks, i);
    char* written = widened(dtype) ? b.wide_out.sized(plan.out_user.get_size()) : result;
    const char* user_in = source ? source(i) : chunk_start(in, chunks, i);
    const char* in_float32 = as_float32(dtype, user_in, plan.in_user, b.wide_in);
    memory src_user(plan.in_user, engine, const_cast<char*>(in_float32));
    // Activations already in the primitive's layout (NHWC bfloat16) are read and written in place.
    const bool in_place_in = plan.in_user == plan.in_prim, in_place_out = plan.out_user == plan.out_prim;
    memory src(plan.in_prim, engine, in_place_in ? const_cast<char*>(in_float32) : b.in.sized(plan.in_prim.get_size()));
    memory dst(plan.out_prim, engine, in_place_out ? written : b.out.sized(plan.out_prim.get_size()));
    memory dst_user(plan.out_user, engine, written);
    memory wm(plan.weights_prim, engine, const_cast<void*>(w.of(plans, chunks, i)));
    memory sm(plan.scratch, engine, b.scratch.sized(plan.scratch.get_size()));
    if (!in_place_in) move_activations(plan.in_reorder, s, src_user, src);
    std::unordered_map<int, memory> args{
        {in_arg, src}, {DNNL_ARG_WEIGHTS, wm}, {out_arg, dst}, {DNNL_ARG_SCRATCHPAD, sm}};
    if (bias_values != nullptr) args.emplace(DNNL_ARG_BIAS, memory(plan.bias, engine, const_cast<void*>(bias_values)));
    plan.primitive.execute(s, args);
    if (!in_place_out) move_activations(plan.out_reorder, s, dst, dst_user);
    s.wait();
    // A widened chunk is ReLU'd in float32, before its rounding (the same bits: rounding to
    // nearest keeps the sign, and NaN stays NaN), where relu_in_place runs vectorised.
    if (relu) relu_block(widened(dtype) ? kFloat32 : dtype, written, count);
    if (widened(dtype)) store_run(reinterpret_cast<const float*>(written), reinterpret_cast<Half*>(result), count);
    if (pool != nullptr)
      pool_block(dtype, result, *pool, i * chunks.per * dims[1], dims[0] * dims[1], dims[2], dims[3]);
    if (after) after(i, src, in_float32);
  });
}

}  // namespace

bool onednn_conv2d_applies(const Tensor& input) { return applies(input); }

std::string cpu_conv_paths() {
  const CpuCaps& caps = cpu_caps();
  if (!caps.onednn) return "conv2d on im2col + GEMM (oneDNN off)";
  return fmt::format(
      "conv2d: bfloat16 {}, float32 {}, float16 {}; forwards at most {} deep (a first layer) on im2col",
      !caps.native_bf16()         ? "widened on im2col + GEMM"
      : winograd_bf16_available() ? "on oneDNN's primitives (3x3 stride-1 layers from 8x8 on halfgrad's Winograd)"
                                  : "on oneDNN's primitives",
      float32_on_primitives() ? "on oneDNN's primitives" : "on im2col + GEMM",
      float32_on_primitives() ? "widened per chunk onto the float32 primitives" : "widened on im2col + GEMM",
      kForwardOwnPathDepth);
}

bool onednn_conv2d_forward(const Tensor& out, const Tensor& input, const Tensor& weight, const Tensor& bias,
                           const Conv2dParams& p) {
  if (!applies(input)) return false;
  const Problem pr = problem_of(input, weight, out.size(2), out.size(3), bias.defined(), p);
  if (forward_on_own_path(pr)) return false;
  const Chunks chunks = chunks_for(pr.n);
  if (on_winograd_bf16(pr, ConvPass::Forward)) {
    const WinogradFilter filter(weight, pr, false);
    std::vector<float> bias_values;
    if (bias.defined()) bias_values = bias.to(kFloat32).to_vector<float>();
    run_parallel(chunks.count, [&](int64_t i) {
      winograd_bf16_conv(reinterpret_cast<const BFloat16*>(chunk_start(input, chunks, i)),
                         reinterpret_cast<BFloat16*>(chunk_start(out, chunks, i)), chunks.size(i, pr.n), pr.c, pr.o,
                         pr.h, pr.w, pr.nhwc, filter.u.data(), bias.defined() ? bias_values.data() : nullptr, p.relu);
    });
    return true;
  }
  const ChunkPlans plans = plans_for(Pass::Forward, pr, chunks);
  if (!plans.usable()) return false;
  run_or_fail("forward", [&] {
    run_activation_pass(plans, chunks, weight, input, DNNL_ARG_SRC, out, DNNL_ARG_DST, bias, p.relu);
  });
  return true;
}

bool onednn_conv2d_relu_max_pool_forward(const Tensor& pooled, const Tensor& which, const Tensor& input,
                                         const Tensor& weight, const Tensor& bias, const Conv2dParams& p, int64_t oh,
                                         int64_t ow) {
  if (!applies(input)) return false;
  const Problem pr = problem_of(input, weight, oh, ow, bias.defined(), p);
  if (forward_on_own_path(pr)) return false;
  const Chunks chunks = pooled_chunks(pr);
  const ChunkPlans plans = plans_for(Pass::Forward, pr, chunks);
  if (!plans.usable()) return false;
  const PoolInto into{static_cast<char*>(pooled.raw_data()), static_cast<uint8_t*>(which.raw_data())};
  run_or_fail("forward", [&] {
    run_activation_pass(plans, chunks, weight, input, DNNL_ARG_SRC, Tensor(), DNNL_ARG_DST, bias, true, &into);
  });
  return true;
}

namespace {

// The weight-gradient pass's float32 partial sums, one block per chunk in OIHW order (then the
// bias's), added in float32 and rounded once to the gradient's dtype at the end, as the float32
// accumulation of the reference path does. With a single chunk there is nothing to add: float32
// gradients are written in place, and bfloat16 ones come from a rounded plan (onednn_plan.h's
// BackwardFilterRounded: oneDNN rounds its float32 sums once) straight into the tensor, sparing
// a float32 copy of the weights' size; only a bias's sums stay here. The blocks are not zeroed
// first: each chunk's pass writes its whole block. They come from the caching allocator (a fresh
// allocation per call faulted in its pages every step).
struct FilterPartials {
  int64_t wn, bn;
  std::optional<Workspace<float>> sums;
  float *direct_weight = nullptr, *direct_bias = nullptr;
  BFloat16* rounded_weight = nullptr;  // a rounded plan's (or the bfloat16 GEMM's) gradient goes here
  float* widened_weight = nullptr;     // or, widened (a float32 gradient of bfloat16 tensors), here
  // `widened`: grad_weight is float32 for bfloat16 tensors, written by a rounded plan's unblocking.
  FilterPartials(const Tensor& grad_weight, const Tensor& grad_bias, bool bias, int64_t o, const Chunks& chunks,
                 bool rounded_plan, bool widened = false)
      : wn(grad_weight.numel()), bn(bias ? o : 0) {
    if (widened) {
      widened_weight = static_cast<float*>(grad_weight.raw_data());
      sums.emplace(bn);
      return;
    }
    if (chunks.count == 1 && grad_weight.dtype() == kFloat32 && (!bias || grad_bias.dtype() == kFloat32)) {
      direct_weight = static_cast<float*>(grad_weight.raw_data());
      if (bias) direct_bias = static_cast<float*>(grad_bias.raw_data());
      return;
    }
    if (rounded_plan) {
      rounded_weight = static_cast<BFloat16*>(grad_weight.raw_data());
      sums.emplace(bn);  // the bias's sums only
      return;
    }
    sums.emplace(chunks.count * (wn + bn));
  }
  float* weights_of(int64_t chunk) {
    if (direct_weight) return direct_weight;
    return rounded_weight || widened_weight ? nullptr : sums->data() + chunk * (wn + bn);
  }
  float* bias_of(int64_t chunk) {
    if (direct_weight) return direct_bias;
    return rounded_weight || widened_weight ? sums->data() : sums->data() + chunk * (wn + bn) + wn;
  }
  void reduce_into(const Tensor& grad_weight, const Tensor& grad_bias, const Chunks& chunks) const {
    if (direct_weight != nullptr) return;
    if (rounded_weight != nullptr || widened_weight != nullptr) {
      if (bn) store_run(sums->data(), static_cast<BFloat16*>(grad_bias.raw_data()), bn);
      return;
    }
    // Added chunk by chunk into the first block (the order of the sums as before, so the result
    // does not depend on how the range is split), then rounded in one vectorised pass: both over
    // the pool, in ranges (a serial pass over a 512x512x3x3 weight's sums took milliseconds while
    // the other threads waited).
    float* total = sums->data();
    const int64_t block = wn + bn;
    dispatch_floating(grad_weight.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
      T* gw = static_cast<T*>(grad_weight.raw_data());
      T* gb = bn ? static_cast<T*>(grad_bias.raw_data()) : nullptr;
      parallel_for(block, kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = 1; i < chunks.count; ++i) {
          const float* part = sums->data() + i * block;
          for (int64_t j = begin; j < end; ++j) total[j] += part[j];
        }
        const int64_t w_end = std::min(end, wn);
        if (begin < w_end) store_run(total + begin, gw + begin, w_end - begin);
        const int64_t b_begin = std::max(begin, wn);
        if (b_begin < end) store_run(total + b_begin, gb + (b_begin - wn), end - b_begin);
      });
    });
  }
};

// Chunk i's weight-gradient pass into its partial sums, on the calling pool thread: the input
// reordered to the primitive's layout, and the chunk's output gradient too (at gy_user) unless
// `gy_ready` holds it so already.
void filter_chunk(const Plan& plan, const Chunks& chunks, int64_t i, const Tensor& input, const char* gy_user,
                  FilterPartials& partials, const memory* gy_ready) {
  const dnnl::engine& engine = cpu_engine();
  ThreadBuffers& b = thread_buffers();
  dnnl::stream& s = thread_stream();
  const Dtype dtype = input.dtype();
  // Activations already in the primitive's layout are read in place.
  char* x_values = const_cast<char*>(as_float32(dtype, chunk_start(input, chunks, i), plan.in_user, b.wide_x));
  const bool x_in_place = plan.in_user == plan.in_prim;
  memory x_user(plan.in_user, engine, x_values);
  memory x(plan.in_prim, engine, x_in_place ? x_values : b.x.sized(plan.in_prim.get_size()));
  memory gy;
  if (gy_ready != nullptr) {
    gy = *gy_ready;
  } else {
    char* gy_values = const_cast<char*>(as_float32(dtype, gy_user, plan.out_user, b.wide_in));
    if (plan.out_user == plan.out_prim) {
      gy = memory(plan.out_prim, engine, gy_values);
    } else {
      gy = memory(plan.out_prim, engine, b.gy.sized(plan.out_prim.get_size()));
      memory gy_user_layout(plan.out_user, engine, gy_values);
      move_activations(plan.out_reorder, s, gy_user_layout, gy);
    }
  }
  memory dw(plan.weights_prim, engine, b.weights.sized(plan.weights_prim.get_size()));
  void* plain = plan.rounded ? static_cast<void*>(partials.rounded_weight) : partials.weights_of(i);
  memory dw_plain(plan.weights_user, engine, plan.filter_blocks16 ? nullptr : plain);  // oneDNN's reorder writes it
  memory sm(plan.scratch, engine, b.scratch.sized(plan.scratch.get_size()));
  if (!x_in_place) move_activations(plan.in_reorder, s, x_user, x);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, gy}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_SCRATCHPAD, sm}};
  if (partials.bn) args.emplace(DNNL_ARG_DIFF_BIAS, memory(plan.bias, engine, partials.bias_of(i)));
  plan.primitive.execute(s, args);
  if (!plan.filter_blocks16) plan.weights_reorder.execute(s, dw, dw_plain);
  s.wait();
  if (plan.filter_blocks16) {
    const memory::dims d = plan.weights_user.dims();  // O, I, kh, kw
    if (partials.widened_weight)
      unblock_filter_gradient(static_cast<const BFloat16*>(dw.get_data_handle()), partials.widened_weight, d[0], d[1],
                              d[2] * d[3], plan.weights_ohwi);
    else if (plan.rounded)
      unblock_filter_gradient(static_cast<const BFloat16*>(dw.get_data_handle()), partials.rounded_weight, d[0], d[1],
                              d[2] * d[3], plan.weights_ohwi);
    else
      unblock_filter_gradient(static_cast<const float*>(dw.get_data_handle()), partials.weights_of(i), d[0], d[1],
                              d[2] * d[3], plan.weights_ohwi);
  }
}

// Chunk i's weight-gradient pass on the batched GEMM (conv/filter_gemm.h, where conv/algorithm.h
// puts it) into its partial sums, on the calling pool thread; gy: the chunk's output gradient,
// NCHW or NHWC, float32 (float16 widened), or bfloat16: one chunk's gradient rounded (or widened)
// straight into the tensor, several chunks' float32 partial sums.
void filter_chunk_gemm(const Problem& pr, const Chunks& chunks, int64_t i, const Tensor& input, const char* gy,
                       FilterPartials& partials) {
  const int64_t n = chunks.size(i, pr.n);
  Conv2dParams p;
  for (int d = 0; d < 2; ++d) p.stride[d] = pr.stride[d], p.padding[d] = pr.padding[d], p.dilation[d] = pr.dilation[d];
  const ConvGeometry g = conv_geometry(n, pr.c, pr.h, pr.w, pr.o, pr.kh, pr.kw, pr.oh, pr.ow, p);
  float* db = partials.bn ? partials.bias_of(i) : nullptr;
  if (input.dtype() == kBFloat16) {
    const auto* x = reinterpret_cast<const BFloat16*>(chunk_start(input, chunks, i));
    const auto* gy16 = reinterpret_cast<const BFloat16*>(gy);
    const auto run = [&](auto* dw) {
      if (pr.nhwc)
        filter_gradient_gemm_nhwc(g, x, gy16, dw, db);
      else
        filter_gradient_gemm(g, x, gy16, dw, db);
    };
    if (partials.rounded_weight != nullptr)
      run(partials.rounded_weight);
    else
      run(partials.weights_of(i));
    return;
  }
  const float* x =
      as_float32(input.dtype(), chunk_start(input, chunks, i), n * pr.c * pr.h * pr.w, thread_buffers().wide_x);
  if (pr.nhwc)
    filter_gradient_gemm_nhwc(g, x, reinterpret_cast<const float*>(gy), partials.weights_of(i), db);
  else
    filter_gradient_gemm(g, x, reinterpret_cast<const float*>(gy), partials.weights_of(i), db);
}

// Chunk i's weight-gradient pass on the bfloat16 Winograd kernel (conv/winograd_bf16.h), from its
// output gradient gy in halfgrad's layout: one chunk's gradient rounded (or widened) straight
// into the tensor, several chunks' float32 partial sums.
void filter_chunk_winograd(const Problem& pr, const Chunks& chunks, int64_t i, const Tensor& input, const char* gy,
                           FilterPartials& partials) {
  void* dw = partials.rounded_weight;
  WinogradFilterGradient form = WinogradFilterGradient::Rounded;
  if (partials.widened_weight != nullptr)
    dw = partials.widened_weight, form = WinogradFilterGradient::Widened;
  else if (partials.rounded_weight == nullptr)
    dw = partials.weights_of(i), form = WinogradFilterGradient::Sums;
  winograd_bf16_filter_gradient(reinterpret_cast<const BFloat16*>(chunk_start(input, chunks, i)),
                                reinterpret_cast<const BFloat16*>(gy), chunks.size(i, pr.n), pr.c, pr.o, pr.h, pr.w,
                                pr.nhwc, pr.ohwi, dw, form, partials.bn ? partials.bias_of(i) : nullptr);
}

// The backward passes of every entry point below: the input gradient where grad_input is defined
// (from `weight`), the weight and bias gradients where grad_weight / grad_bias are (from `input`).
// `grad_out` gives each chunk's output gradient, in halfgrad's layout. With both, each chunk's output gradient is
// put in the primitives' layout once, by the input-gradient pass, and handed from there to the chunk's
// weight-gradient pass. pr: the convolution's problem (without a bias); false, having written
// nothing, where a pass has no usable plan.
bool backward_chunks(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& input,
                     const Tensor& weight, const Problem& pr, const Chunks& chunks, const ChunkSource& grad_out) {
  Problem filter_pr = pr;
  filter_pr.bias = grad_bias.defined();
  ChunkPlans data_plans, filter_plans;
  // The GEMM's forms: NCHW activations with OIHW weights, or channels-last ones with OHWI weights
  // (a channels-last input with an OIHW weight keeps the direct kernel). bfloat16 in one chunk
  // rounds its sums into the gradient; in several, each keeps float32 partial sums.
  const bool filter_on_gemm = grad_weight.defined() && pr.nhwc == pr.ohwi &&
                              conv_algorithm(filter_pr.shape(), ConvPass::WeightGradient) == ConvAlgorithm::Gemm;
  const bool filter_on_winograd =
      grad_weight.defined() && !filter_on_gemm && on_winograd_bf16(filter_pr, ConvPass::WeightGradient);
  const bool data_on_winograd = grad_input.defined() && on_winograd_bf16(pr, ConvPass::InputGradient);
  if (grad_input.defined() && !data_on_winograd && !(data_plans = plans_for(Pass::BackwardData, pr, chunks)).usable())
    return false;
  if (grad_weight.defined() && !filter_on_gemm && !filter_on_winograd) {
    // A call of one chunk of bfloat16 gradients has nothing to add across chunks: oneDNN rounds.
    if (chunks.count == 1 && pr.dt == kBf16) filter_plans = plans_for(Pass::BackwardFilterRounded, filter_pr, chunks);
    if (!filter_plans.usable()) filter_plans = plans_for(Pass::BackwardFilter, filter_pr, chunks);
    if (!filter_plans.usable()) return false;
  }
  // A widened weight gradient (float32 for 16-bit tensors, conv2d_widened_weight_grad_in_kernel):
  // a one-chunk bfloat16 pass widens it while unblocking oneDNN's rounded blocks, or rounds
  // Winograd's float32 sums into it; elsewhere the 16-bit gradient is made as usual and widened
  // after.
  const bool widen = grad_weight.defined() && grad_weight.dtype() != input.dtype();
  if (widen) {
    const bool in_unblocking =
        chunks.count == 1 &&
        (filter_on_winograd || (!filter_on_gemm && filter_plans.full->rounded && filter_plans.full->filter_blocks16));
    if (!in_unblocking) {
      const Tensor narrow =
          empty(grad_weight.shape(), TensorOptions(input.dtype()), grad_weight.suggest_memory_format());
      if (!backward_chunks(grad_input, narrow, grad_bias, input, weight, pr, chunks, grad_out)) return false;
      dispatch_floating(input.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
        load_run(static_cast<const T*>(narrow.raw_data()), static_cast<float*>(grad_weight.raw_data()),
                 grad_weight.numel());
      });
      return true;
    }
  }
  std::optional<FilterPartials> partials;
  if (grad_weight.defined())
    partials.emplace(
        grad_weight, grad_bias, filter_pr.bias, filter_pr.o, chunks,
        filter_on_winograd || filter_on_gemm ? pr.dt == kBf16 && chunks.count == 1 : filter_plans.full->rounded, widen);
  const char* what = !grad_weight.defined()  ? "backward (input gradient)"
                     : !grad_input.defined() ? "backward (weight gradient)"
                                             : "backward";
  // Chunk i's weight-gradient pass from its output gradient in halfgrad's layout.
  const auto filter_from_user = [&](int64_t i, const char* gy_user) {
    if (filter_on_winograd) {
      filter_chunk_winograd(pr, chunks, i, input, gy_user, *partials);
    } else if (filter_on_gemm) {
      const float* gy =
          as_float32(input.dtype(), gy_user, chunks.size(i, pr.n) * pr.o * pr.oh * pr.ow, thread_buffers().wide_in);
      filter_chunk_gemm(pr, chunks, i, input, reinterpret_cast<const char*>(gy), *partials);
    } else {
      filter_chunk(filter_plans.of(chunks, i), chunks, i, input, gy_user, *partials, nullptr);
    }
  };
  run_or_fail(what, [&] {
    if (data_on_winograd) {
      const WinogradFilter filter(weight, pr, true);
      run_parallel(chunks.count, [&](int64_t i) {
        const OneOpenMPThread one_thread;
        const char* gy = grad_out(i);
        winograd_bf16_conv(reinterpret_cast<const BFloat16*>(gy),
                           reinterpret_cast<BFloat16*>(chunk_start(grad_input, chunks, i)), chunks.size(i, pr.n), pr.o,
                           pr.c, pr.h, pr.w, pr.nhwc, filter.u.data(), nullptr, false);
        if (partials) filter_from_user(i, gy);
      });
      return;
    }
    if (grad_input.defined()) {
      AfterChunk filter;
      if (partials) {
        filter = [&](int64_t i, const memory& gy, const char* gy_float32) {
          if (filter_on_winograd)
            filter_chunk_winograd(pr, chunks, i, input, gy_float32, *partials);
          else if (filter_on_gemm)
            filter_chunk_gemm(pr, chunks, i, input, gy_float32, *partials);
          else
            filter_chunk(filter_plans.of(chunks, i), chunks, i, input, nullptr, *partials, &gy);
        };
      }
      run_activation_pass(data_plans, chunks, weight, Tensor(), DNNL_ARG_DIFF_DST, grad_input, DNNL_ARG_DIFF_SRC,
                          Tensor(), false, nullptr, filter, grad_out);
      return;
    }
    run_parallel(chunks.count, [&](int64_t i) {
      const OneOpenMPThread one_thread;
      filter_from_user(i, grad_out(i));
    });
  });
  if (partials) partials->reduce_into(grad_weight, grad_bias, chunks);
  return true;
}

// conv2d_relu's and conv2d_relu_max_pool2d's backward: chunk i's convolution output gradient, NCHW
// in a per-thread buffer, made from the op's (conv/relu_grad.h).
struct MadeOutputGrad {
  const Conv2dReluGrad& from;
  int64_t o, oh, ow;
  const char* make(const Chunks& chunks, int64_t i, int64_t samples) const {
    const size_t bytes = static_cast<size_t>(samples * o * oh * ow) * element_size(from.grad.dtype());
    char* buf = thread_buffers().gy_nchw.sized(bytes);
    dispatch_floating(from.grad.dtype(), "conv2d", [&]<class T>(TypeTag<T>) {
      make_conv_output_grad(from, i * chunks.per, samples, o, oh, ow, reinterpret_cast<T*>(buf));
    });
    return buf;
  }
};

}  // namespace

bool onednn_conv2d_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& weight,
                                 const Conv2dParams& p) {
  if (!applies(grad_out)) return false;
  const Problem pr = problem_of(grad_input, weight, grad_out.size(2), grad_out.size(3), false, p);
  const Chunks chunks = chunks_for(pr.n);
  return backward_chunks(grad_input, Tensor(), Tensor(), Tensor(), weight, pr, chunks,
                         [&](int64_t i) { return chunk_start(grad_out, chunks, i); });
}

bool onednn_conv2d_backward_filter(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                   const Tensor& input, const Conv2dParams& p) {
  if (!applies(grad_out)) return false;
  const Problem pr = problem_of(input, grad_weight, grad_out.size(2), grad_out.size(3), false, p);
  const Chunks chunks = chunks_for(pr.n);
  return backward_chunks(Tensor(), grad_weight, grad_bias, input, Tensor(), pr, chunks,
                         [&](int64_t i) { return chunk_start(grad_out, chunks, i); });
}

bool onednn_conv2d_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                            const Tensor& grad_out, const Tensor& input, const Tensor& weight, const Conv2dParams& p) {
  if (!applies(grad_out)) return false;
  const Problem pr = problem_of(input, weight, grad_out.size(2), grad_out.size(3), false, p);
  const Chunks chunks = chunks_for(pr.n);
  return backward_chunks(grad_input, grad_weight, grad_bias, input, weight, pr, chunks,
                         [&](int64_t i) { return chunk_start(grad_out, chunks, i); });
}

bool onednn_conv2d_relu_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                 const Conv2dReluGrad& from, const Tensor& input, const Tensor& weight,
                                 const Conv2dParams& p, int64_t oh, int64_t ow) {
  if (!applies(from.grad) || (!grad_input.defined() && !grad_weight.defined())) return false;
  const Problem pr = problem_of(input, weight, oh, ow, false, p);
  const Chunks chunks = pooled_chunks(pr);
  const MadeOutputGrad gy{from, pr.o, oh, ow};
  return backward_chunks(grad_input, grad_weight, grad_bias, input, weight, pr, chunks,
                         [&](int64_t i) { return gy.make(chunks, i, chunks.size(i, pr.n)); });
}

#else  // built without oneDNN

bool onednn_conv2d_applies(const Tensor&) { return false; }
std::string cpu_conv_paths() { return "conv2d on im2col + GEMM (built without oneDNN)"; }
bool onednn_conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  return false;
}
bool onednn_conv2d_relu_max_pool_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Conv2dParams&, int64_t, int64_t) {
  return false;
}
bool onednn_conv2d_backward_data(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) { return false; }
bool onednn_conv2d_backward_filter(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  return false;
}
bool onednn_conv2d_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const Conv2dParams&) {
  return false;
}
bool onednn_conv2d_relu_backward(const Tensor&, const Tensor&, const Tensor&, const Conv2dReluGrad&, const Tensor&,
                                 const Tensor&, const Conv2dParams&, int64_t, int64_t) {
  return false;
}
#endif

}  // namespace hg::cpu
