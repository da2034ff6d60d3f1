#include "kernels/cpu/onednn_matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "framework/error.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/workspace.h"

#if HG_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace hg::cpu {

#if HG_HAVE_ONEDNN
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

// A matmul primitive made for one problem (sizes and operand strides), with the size of the
// scratch memory it asks for. `usable` is false when oneDNN only had a reference kernel.
struct Plan {
  bool usable = false;
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, out, scratch;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc matrix_desc(const MatrixView& v) {
  return dnnl::memory::desc({v.rows, v.cols}, dnnl::memory::data_type::bf16, {v.row_stride, v.col_stride});
}

std::shared_ptr<const Plan> make_plan(const MatrixView& av, const MatrixView& bv) {
  auto plan = std::make_shared<Plan>();
  plan->a = matrix_desc(av);
  plan->b = matrix_desc(bv);
  plan->out = dnnl::memory::desc({av.rows, bv.cols}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
  dnnl::primitive_attr attr;
  // Scratch memory comes from the caller on every run, so one primitive can run on several
  // threads at once.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->a, plan->b, plan->out), attr, cpu_engine());
    if (std::strstr(pd.impl_info_str(), "ref") != nullptr) return plan;  // too slow to be worth it
    plan->primitive = dnnl::matmul(pd);
    plan->scratch = pd.scratchpad_desc();
    plan->usable = true;
  } catch (const dnnl::error&) {
    // This shape or layout is not supported: the caller widens to float32 instead.
  }
  return plan;
}

// Plans are made once per problem (a few milliseconds each) and kept: a training loop
// multiplies the same handful of shapes on every step.
std::shared_ptr<const Plan> plan_for(const MatrixView& av, const MatrixView& bv) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Plan>> plans;
  const Key key{av.rows, av.cols, bv.cols, av.row_stride, av.col_stride, bv.row_stride, bv.col_stride};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(av, bv)).first;
  return it->second;
}

bool native_bf16_cpu() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// Runs one plan on the calling thread.
void run_plan(const Plan& plan, BFloat16* out, const BFloat16* a, const BFloat16* b) {
  const dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  Workspace<char> scratch(static_cast<int64_t>(plan.scratch.get_size()));
  // oneDNN takes non-const handles but only reads the operands.
  const dnnl::memory ma(plan.a, engine, const_cast<BFloat16*>(a)), mb(plan.b, engine, const_cast<BFloat16*>(b)),
      mo(plan.out, engine, out), ms(plan.scratch, engine, scratch.data());
  plan.primitive.execute(stream,
                         {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mo}, {DNNL_ARG_SCRATCHPAD, ms}});
  stream.wait();
}

// oneDNN runs on OpenMP (Debian's build uses libgomp). OpenMP worker threads spin while they
// wait, and on a machine whose cores are all busy (halfgrad's own pool, OpenBLAS, other
// processes) that spinning made a bfloat16 MLP step 10x slower. So every thread that calls
// oneDNN asks for a team of one, and halfgrad splits the rows across its own pool instead.
void use_one_openmp_thread() {
  thread_local const bool done = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace

bool onednn_bf16_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("HG_CPU_ONEDNN");
    if (env != nullptr && std::string(env) == "0") return false;
    return native_bf16_cpu();
  }();
  return enabled;
}

bool onednn_bf16_gemm(BFloat16* out, const BFloat16* a, MatrixView av, const BFloat16* b, MatrixView bv) {
  if (!onednn_bf16_enabled()) return false;
  if (!plan_for(av, bv)->usable) return false;
  // Rows per thread: whole AMX tiles (16 rows), and enough work to pay for a hand-off.
  constexpr int64_t kRowQuantum = 32;
  const int64_t work_per_row = std::max<int64_t>(1, av.cols * bv.cols);
  const int64_t grain_rows = std::max<int64_t>(kRowQuantum, (int64_t{1} << 21) / work_per_row);
  const int64_t chunks = std::min<int64_t>(num_threads(), (av.rows + grain_rows - 1) / grain_rows);
  const int64_t step = chunks <= 1 ? av.rows : (av.rows + chunks - 1) / chunks;
  const int64_t rows_per_chunk = (step + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  const int64_t used_chunks = (av.rows + rows_per_chunk - 1) / rows_per_chunk;
  try {
    parallel_for(used_chunks, 1, [&](int64_t begin, int64_t end) {
      use_one_openmp_thread();
      for (int64_t c = begin; c < end; ++c) {
        const int64_t r0 = c * rows_per_chunk, rows = std::min(rows_per_chunk, av.rows - r0);
        const MatrixView part{rows, av.cols, av.row_stride, av.col_stride};
        const auto plan = plan_for(part, bv);
        HG_CHECK(plan->usable, "mm", "oneDNN took a [{}, {}] bfloat16 matrix but not its first {} rows", av.rows,
                 av.cols, rows);
        run_plan(*plan, out + r0 * bv.cols, a + r0 * av.row_stride, b);
      }
    });
  } catch (const dnnl::error& e) {
    fail("mm", "oneDNN bfloat16 matmul of [{}, {}] @ [{}, {}] failed: {}", av.rows, av.cols, bv.rows, bv.cols,
         e.what());
  }
  return true;
}

#else  // built without oneDNN

bool onednn_bf16_enabled() { return false; }
bool onednn_bf16_gemm(BFloat16*, const BFloat16*, MatrixView, const BFloat16*, MatrixView) { return false; }

#endif

}  // namespace hg::cpu
