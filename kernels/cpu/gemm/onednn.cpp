#include "kernels/cpu/gemm/onednn.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>

#include "framework/error.h"
#include "kernels/cpu/gemm/route.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/workspace.h"

#if HG_HAVE_ONEDNN
#include "kernels/cpu/onednn_common.h"
#endif

namespace hg::cpu {

#if HG_HAVE_ONEDNN
namespace {

// A problem: sizes, operand strides, the output's row stride, whether a bias is added, and the
// dtypes of the operands (bfloat16, or float32 for the products sgemm packs slowly:
// float32_on_matmul) and of the result (theirs, or float32 for bfloat16 sums kept widened).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int>;

// A matmul primitive made for one problem. `usable` is false when oneDNN only had a reference
// kernel (or none): the caller then takes another path.
struct Plan {
  bool usable = false;
  bool brgemm = false;  // oneDNN's brgemm kernels (AMX tiles, AVX-512 BF16), not its gemm:jit fallback
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, out, bias, scratch;
};

std::shared_ptr<const Plan> make_plan(const MatrixView& av, const MatrixView& bv, int64_t out_ld, bool bias,
                                      dnnl::memory::data_type dt, dnnl::memory::data_type out_dt) {
  auto plan = std::make_shared<Plan>();
  plan->a = dnnl::memory::desc({av.rows, av.cols}, dt, {av.row_stride, av.col_stride});
  plan->b = dnnl::memory::desc({bv.rows, bv.cols}, dt, {bv.row_stride, bv.col_stride});
  plan->out = dnnl::memory::desc({av.rows, bv.cols}, out_dt, {out_ld, 1});
  if (bias) plan->bias = dnnl::memory::desc({1, bv.cols}, dt, {bv.cols, 1});
  dnnl::primitive_attr attr;
  // Scratch memory comes from the caller on every run, so one primitive can run on several
  // threads at once.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  try {
    const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(plan->a, plan->b, plan->bias, plan->out)
                                         : dnnl::matmul::desc(plan->a, plan->b, plan->out);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    if (std::strstr(pd.impl_info_str(), "ref") != nullptr) return plan;  // too slow to be worth it
    plan->primitive = dnnl::matmul(pd);
    plan->scratch = pd.scratchpad_desc();
    plan->usable = true;
    plan->brgemm = std::strstr(pd.impl_info_str(), "brg") != nullptr;
  } catch (const dnnl::error&) {
    // This problem is not supported: the caller uses OpenBLAS instead.
  }
  return plan;
}

// The plan for a problem, made the first time it is asked for (onednn_common.h's cache).
std::shared_ptr<const Plan> plan_for(const MatrixView& av, const MatrixView& bv, int64_t out_ld, bool bias,
                                     dnnl::memory::data_type dt = dnnl::memory::data_type::bf16,
                                     std::optional<dnnl::memory::data_type> out_dt = std::nullopt) {
  static PrimitiveCache<Key, Plan> plans;
  const dnnl::memory::data_type result = out_dt.value_or(dt);
  const Key key{av.rows,       av.cols, bv.cols, av.row_stride,        av.col_stride,           bv.row_stride,
                bv.col_stride, out_ld,  bias,    static_cast<int>(dt), static_cast<int>(result)};
  return plans.get(key, [&] { return make_plan(av, bv, out_ld, bias, dt, result); });
}

// Runs a plan on the calling thread.
void run_plan(const Plan& plan, void* out, const void* a, const void* b, const void* bias) {
  const OneOpenMPThread one_thread;
  const dnnl::engine& engine = cpu_engine();
  dnnl::stream& stream = thread_stream();
  // Scratch memory: one buffer per thread that only grows.
  thread_local GrowBuffer scratch;
  // oneDNN takes non-const handles but only reads the operands.
  const dnnl::memory ma(plan.a, engine, const_cast<void*>(a)), mb(plan.b, engine, const_cast<void*>(b)),
      mo(plan.out, engine, out), ms(plan.scratch, engine, scratch.sized(plan.scratch.get_size()));
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mo}, {DNNL_ARG_SCRATCHPAD, ms}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, dnnl::memory(plan.bias, engine, const_cast<void*>(bias)));
  plan.primitive.execute(stream, args);
  stream.wait();
}

// Runs a part's plan into its place in the result (row stride out_ld, elements of elem bytes):
// directly, or, `staged` (a column part, whose row stride brgemm does not take), into a dense
// buffer whose rows are then copied into the part's columns.
void run_part(const Plan& plan, char* part_out, int64_t out_ld, int64_t elem, bool staged, const MatrixView& pa,
              const MatrixView& pb, const void* a, const void* b, const void* bias) {
  if (!staged) {
    run_plan(plan, part_out, a, b, bias);
    return;
  }
  const auto row_bytes = static_cast<size_t>(pb.cols * elem);
  Workspace<char> dense_out(pa.rows * pb.cols * elem);
  run_plan(plan, dense_out.data(), a, b, bias);
  for (int64_t r = 0; r < pa.rows; ++r)
    std::memcpy(part_out + r * out_ld * elem, dense_out.data() + r * static_cast<int64_t>(row_bytes), row_bytes);
}

// out (row stride out_ld) = a @ b, or out += a @ b, in float32 on the calling thread, through
// oneDNN's BLAS-like sgemm: no plan to look up and no memory objects to make per call, which
// conv's many small per-sample products notice (about 6% of a CNN step against plans).
void run_sgemm(float* out, int64_t out_ld, bool accumulate, const float* a, const MatrixView& av, const float* b,
               const MatrixView& bv) {
  const auto blas = [](const MatrixView& v) {  // transpose flag and leading dimension
    const bool t = v.row_stride == 1 && v.cols > 1;
    return std::pair<char, int64_t>{t ? 'T' : 'N', t ? v.col_stride : v.row_stride};
  };
  const auto [ta, lda] = blas(av);
  const auto [tb, ldb] = blas(bv);
  const OneOpenMPThread one_thread;
  const dnnl_status_t status =
      dnnl_sgemm(ta, tb, av.rows, bv.cols, av.cols, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, out, out_ld);
  HG_CHECK(status == dnnl_success, "mm", "oneDNN sgemm of [{}, {}] @ [{}, {}] failed with status {}", av.rows, av.cols,
           bv.rows, bv.cols, static_cast<int>(status));
}

// Whether a float32 product runs on oneDNN's matmul primitive (its brgemm kernels) instead of its
// sgemm: when b is stored by columns (x @ W^T, a weight read transposed), which sgemm packs
// slowly, and a is row-major, with an inner dimension of at least brgemm_min_depth (shorter ones,
// as the transformer example's 64-wide layers, were not measured and keep sgemm). On the Zen 4
// brgemm was faster for the MNIST CNN's fc1 forward and the MLP's fc2 and fc1 forward; every other
// layout was even, and stays on sgemm. Parts of fewer than brgemm_min_part_work multiply-adds keep
// sgemm too, whose calls cost less (no plan to look up, no memory objects). (route.h's table.)
bool float32_on_matmul(const MatrixView& av, const MatrixView& bv, bool accumulate) {
  const bool b_by_columns = bv.row_stride == 1 && bv.col_stride > 1 && bv.rows > 1;
  // (oneDNN 2.6's float32 brgemm needs AVX-512; elsewhere every part would find none.)
  return cpu_caps().avx512 && !accumulate && b_by_columns && av.col_stride == 1 &&
         av.cols >= kGemmThresholds.brgemm_min_depth;
}

// How one multiply is cut into parts for the pool: along the rows of a (and out) or the
// columns of b (and out), whichever is longer, in whole blocks of the kernels' tile width.
struct Split {
  bool by_rows = true;
  int64_t part = 0, parts = 1;
};
Split split_for(const MatrixView& av, const MatrixView& bv, bool by_rows) {
  constexpr int64_t kQuantum = 32;
  constexpr int64_t kWorkPerPart = int64_t{1} << 21;  // multiply-adds worth a hand-off
  const int64_t length = by_rows ? av.rows : bv.cols;
  const int64_t work_per_unit = std::max<int64_t>(1, av.cols * (by_rows ? bv.cols : av.rows));
  const int64_t min_units = std::max<int64_t>(kQuantum, kWorkPerPart / work_per_unit);
  const int64_t chunks = std::clamp<int64_t>(length / min_units, 1, num_threads());
  int64_t part = (length + chunks - 1) / chunks;
  part = std::min(length, (part + kQuantum - 1) / kQuantum * kQuantum);
  return {by_rows, part, (length + part - 1) / part};
}
Split split_for(const MatrixView& av, const MatrixView& bv) { return split_for(av, bv, av.rows >= bv.cols); }

// Part c of a split: its operand views and where its operands and result start.
struct Part {
  MatrixView a, b;
  int64_t a_offset = 0, b_offset = 0, out_offset = 0;  // in bytes
};
Part part_of(const Split& split, const MatrixView& av, const MatrixView& bv, int64_t out_ld, int64_t elem, int64_t c) {
  const int64_t first = c * split.part;
  Part p{av, bv};
  if (split.by_rows) {
    p.a.rows = std::min(split.part, av.rows - first);
    p.a_offset = first * av.row_stride * elem;
    p.out_offset = first * out_ld * elem;
  } else {
    p.b.cols = std::min(split.part, bv.cols - first);
    p.b_offset = first * bv.col_stride * elem;
    p.out_offset = first * elem;
  }
  return p;
}

// Copies the bfloat16 matrix v (at src) into dst, dense and row-major, with a oneDNN reorder
// (a vectorised transpose; made once per shape and kept, like the plans): a scalar tiled copy
// of a transformer's [64, 1024] g^T cost more than brgemm saved.
void copy_dense(const void* src, const MatrixView& v, void* dst) {
  static PrimitiveCache<std::tuple<int64_t, int64_t, int64_t, int64_t>, dnnl::reorder> reorders;
  constexpr auto dt = dnnl::memory::data_type::bf16;
  const dnnl::memory::desc from({v.rows, v.cols}, dt, {v.row_stride, v.col_stride});
  const dnnl::memory::desc to({v.rows, v.cols}, dt, {v.cols, 1});
  const auto reorder = reorders.get({v.rows, v.cols, v.row_stride, v.col_stride}, [&] {
    return std::make_shared<const dnnl::reorder>(dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to));
  });
  const OneOpenMPThread one_thread;
  dnnl::memory in(from, cpu_engine(), const_cast<void*>(src)), out(to, cpu_engine(), dst);
  reorder->execute(thread_stream(), in, out);
  thread_stream().wait();
}

// How a bfloat16 product runs: the split, whether a is first copied into a dense row-major
// matrix, and whether each column part writes a dense buffer that is then copied into its
// columns of the result. oneDNN 2.6's brgemm kernels are several times faster than its gemm:jit
// fallback (a 128x128 @ 128x9216 part: 0.6 ms against 1.9 ms on AMX), and it declines brgemm for
// a result with a row stride other than its width (any column part written in place), for a
// strided b (a column part of a row-major b) and for a transposed a (the g^T of a weight
// gradient). brgemm repacks b on every call, so a split by columns, where each thread repacks
// only its part of b, is tried first unless a has more rows than b has columns. The first of
// these whose parts get brgemm wins: the first split, the other split, then the same two with a
// copied dense when a is transposed and no larger than b (the copy costs k / n of the product),
// each only if it keeps every thread busy; failing all, the usual split if oneDNN has any fast
// kernel for it.
struct Bf16Route {
  Split split;
  bool dense_a = false;
  bool staged_out = false;
  bool usable = false;
};
Bf16Route bf16_route(const MatrixView& av, const MatrixView& bv, int64_t out_ld, bool bias) {
  const bool rows_first = av.rows > bv.cols;
  const MatrixView dense_a{av.rows, av.cols, av.cols, 1};
  // Copying a pays only when it is the smaller operand (a weight gradient's g^T at small batch);
  // the transformer's [256, 1024] g^T beside a [1024, 64] x cost more to copy than brgemm saved.
  const bool a_transposed = av.row_stride == 1 && av.cols > 1 && av.rows > 1;
  const bool copy_a_pays = a_transposed && av.rows * av.cols <= bv.rows * bv.cols;
  // A split into fewer parts than the other would leave threads idle: a 16-row product on one
  // thread's brgemm took 7.5 ms where two threads' gemm:jit took 4.7.
  const int64_t most_parts = std::max(split_for(av, bv, true).parts, split_for(av, bv, false).parts);
  for (const bool dense : {false, true}) {
    if (dense && !copy_a_pays) break;
    const MatrixView& a = dense ? dense_a : av;
    for (const bool by_rows : {rows_first, !rows_first}) {
      const Split split = split_for(a, bv, by_rows);
      if (split.parts < most_parts) continue;
      const Part p = part_of(split, a, bv, out_ld, 2, 0);
      const bool staged = !by_rows && p.b.cols != out_ld;
      if (plan_for(p.a, p.b, staged ? p.b.cols : out_ld, bias)->brgemm) return {split, dense, staged, true};
    }
  }
  const Split split = split_for(av, bv);
  const Part p = part_of(split, av, bv, out_ld, 2, 0);
  return {split, false, false, plan_for(p.a, p.b, out_ld, bias)->usable};
}

}  // namespace

bool onednn_matmul(Dtype dtype, void* out, int64_t out_ld, bool accumulate, const void* a, MatrixView av, const void* b,
                   MatrixView bv, const void* bias) {
  if (av.rows == 0 || bv.cols == 0) return false;
  if (bias != nullptr && dtype != kBFloat16) return false;
  const auto elem = static_cast<int64_t>(element_size(dtype));
  const auto at = [](const void* base, int64_t offset) { return static_cast<const char*>(base) + offset; };
  if (dtype == kFloat32) {
    // The split sgemm would take, so each thread reads the same part of b either way (a split by
    // rows where b is a weight had both cores read all of it, and the optimizer's writes to it
    // then cost more than the product saved). A column part on the matmul primitive writes a
    // dense buffer that is copied into its columns (brgemm takes no result with a row stride
    // other than its width).
    const bool on_matmul = float32_on_matmul(av, bv, accumulate);
    const Split split = split_for(av, bv);
    try {
      parallel_for(split.parts, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          const Part p = part_of(split, av, bv, out_ld, elem, c);
          char* part_out = static_cast<char*>(out) + p.out_offset;
          if (on_matmul && p.a.rows * p.a.cols * p.b.cols >= kGemmThresholds.brgemm_min_part_work) {
            const bool staged = !split.by_rows && p.b.cols != out_ld;
            const auto plan = plan_for(p.a, p.b, staged ? p.b.cols : out_ld, false, dnnl::memory::data_type::f32);
            if (plan->brgemm) {
              run_part(*plan, part_out, out_ld, elem, staged, p.a, p.b, at(a, p.a_offset), at(b, p.b_offset), nullptr);
              continue;
            }
          }
          run_sgemm(reinterpret_cast<float*>(part_out), out_ld, accumulate,
                    reinterpret_cast<const float*>(at(a, p.a_offset)), p.a,
                    reinterpret_cast<const float*>(at(b, p.b_offset)), p.b);
        }
      });
    } catch (const dnnl::error& e) {
      fail("mm", "oneDNN float32 matmul of [{}, {}] @ [{}, {}] failed: {}", av.rows, av.cols, bv.rows, bv.cols,
           e.what());
    }
    return true;
  }
  if (accumulate) return false;
  const Bf16Route route = bf16_route(av, bv, out_ld, bias != nullptr);
  if (!route.usable) return false;
  MatrixView a_view = av;
  Workspace<uint16_t> dense(route.dense_a ? av.rows * av.cols : 0);
  if (route.dense_a) {
    copy_dense(a, av, dense.data());
    a_view = MatrixView{av.rows, av.cols, av.cols, 1};
    a = dense.data();
  }
  try {
    parallel_for(route.split.parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const Part p = part_of(route.split, a_view, bv, out_ld, elem, c);
        const bool staged = route.staged_out && p.b.cols != out_ld;
        const auto plan = plan_for(p.a, p.b, staged ? p.b.cols : out_ld, bias != nullptr);
        HG_CHECK(plan->usable, "mm",
                 "oneDNN planned a [{}, {}] @ [{}, {}] bfloat16 product but not its part [{}, {}] @ [{}, {}]", av.rows,
                 av.cols, bv.rows, bv.cols, p.a.rows, p.a.cols, p.b.rows, p.b.cols);
        // A column part adds its own columns' bias.
        const void* part_bias = bias == nullptr || route.split.by_rows ? bias : at(bias, p.out_offset);
        run_part(*plan, static_cast<char*>(out) + p.out_offset, out_ld, elem, staged, p.a, p.b, at(a, p.a_offset),
                 at(b, p.b_offset), part_bias);
      }
    });
  } catch (const dnnl::error& e) {
    fail("mm", "oneDNN bfloat16 matmul of [{}, {}] @ [{}, {}] failed: {}", av.rows, av.cols, bv.rows, bv.cols,
         e.what());
  }
  return true;
}

bool onednn_matmul_bf16_widened(float* out, int64_t out_ld, const void* a, MatrixView av, const void* b,
                                MatrixView bv) {
  if (av.rows == 0 || bv.cols == 0) return false;
  try {
    const auto plan = plan_for(av, bv, out_ld, false, dnnl::memory::data_type::bf16, dnnl::memory::data_type::f32);
    if (!plan->usable) return false;
    run_plan(*plan, out, a, b, nullptr);
  } catch (const dnnl::error& e) {
    fail("mm", "oneDNN bfloat16 matmul of [{}, {}] @ [{}, {}] into float32 failed: {}", av.rows, av.cols, bv.rows,
         bv.cols, e.what());
  }
  return true;
}

#else  // built without oneDNN

bool onednn_matmul(Dtype, void*, int64_t, bool, const void*, MatrixView, const void*, MatrixView, const void*) {
  return false;
}
bool onednn_matmul_bf16_widened(float*, int64_t, const void*, MatrixView, const void*, MatrixView) { return false; }
#endif

}  // namespace hg::cpu
