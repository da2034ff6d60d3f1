// Just enough of CUDA to run the flash-attention kernels' own device code on the CPU: a block's
// threads as user-level contexts (ucontext) switched by one scheduler on one OS thread, so
// __syncthreads, __syncwarp and __shfl_xor_sync are real barriers (a barrier that not every
// thread reaches is reported as a deadlock), and nvcuda::wmma's 16x16x16 operations done by lane 0
// of the warp between warp barriers and copied to the other lanes (they are warp-collective; the
// kernels only pass them warp-uniform arguments), every lane holding the whole tile. Shared
// memory is poisoned with NaN bytes before each block, so a read of a tile element nobody wrote
// shows up. What this cannot check: wmma's real fragment layouts, timing, occupancy, bank
// conflicts, the launch code. The kernels themselves are compiled unchanged (HG_FLASH_EMULATION
// only drops <mma.h>).
#pragma once

#define HG_FLASH_EMULATION 1

#include <cublasLt.h>  // before the macros below: their parameters use the built-ins' names
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <ucontext.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <type_traits>
#include <vector>

#define __launch_bounds__(x)

namespace hg::emu {

struct Barrier {
  int size = 0, arrived = 0;
  long gen = 0;
};

struct Block {
  struct Thread {
    ucontext_t ctx{};
    bool done = false;
    uint3 idx{};
    const Barrier* waiting = nullptr;  // blocked until waiting->gen != wait_gen
    long wait_gen = 0;
  };
  std::vector<Thread> threads;
  ucontext_t main{};
  int current = 0;
  Barrier all;
  std::vector<Barrier> warps;
  std::vector<double> exchange;       // one slot per thread for the shuffles
  std::vector<const float*> publish;  // per warp: lane 0's fragment, for the other lanes to copy
  const std::function<void()>* body = nullptr;
};

inline Block* g_block = nullptr;
inline uint3 g_thread_idx{}, g_block_idx{};
inline dim3 g_grid_dim, g_block_dim;

inline void yield() {
  Block& b = *g_block;
  swapcontext(&b.threads[static_cast<size_t>(b.current)].ctx, &b.main);
}

inline void wait(Barrier& bar) {
  if (++bar.arrived == bar.size) {  // the last to arrive releases the others and runs on
    bar.arrived = 0;
    ++bar.gen;
    return;
  }
  Block::Thread& self = g_block->threads[static_cast<size_t>(g_block->current)];
  self.waiting = &bar;
  self.wait_gen = bar.gen;
  yield();
  self.waiting = nullptr;
}

inline Barrier& warp_barrier() { return g_block->warps[g_thread_idx.x / 32]; }

inline void trampoline() {
  (*g_block->body)();
  g_block->threads[static_cast<size_t>(g_block->current)].done = true;
}  // returns to uc_link: the scheduler

// Runs one block of `threads` threads, each calling body(), to completion; `ascending` orders
// which runnable thread goes first.
inline void run_block(dim3 grid, uint3 block, int threads, bool ascending, const std::function<void()>& body) {
  constexpr size_t kStack = 256 * 1024;
  static std::vector<std::vector<char>> stacks;
  if (stacks.size() < static_cast<size_t>(threads)) stacks.resize(static_cast<size_t>(threads));
  Block b;
  b.threads.resize(static_cast<size_t>(threads));
  b.all.size = threads;
  b.warps.resize(static_cast<size_t>((threads + 31) / 32));
  for (auto& w : b.warps) w.size = 32;
  b.exchange.resize(static_cast<size_t>(threads));
  b.publish.resize(b.warps.size());
  b.body = &body;
  g_block = &b;
  g_grid_dim = grid;
  g_block_idx = block;
  g_block_dim = dim3(static_cast<unsigned>(threads));
  for (int t = 0; t < threads; ++t) {
    Block::Thread& th = b.threads[static_cast<size_t>(t)];
    th.idx = make_uint3(static_cast<unsigned>(t), 0, 0);
    std::vector<char>& stack = stacks[static_cast<size_t>(t)];
    stack.resize(kStack);
    getcontext(&th.ctx);
    th.ctx.uc_stack.ss_sp = stack.data();
    th.ctx.uc_stack.ss_size = stack.size();
    th.ctx.uc_link = &b.main;
    makecontext(&th.ctx, trampoline, 0);
  }
  // Always resume the first runnable thread in `order`: one warp runs as far ahead of the others
  // as the barriers allow, so a missing __syncthreads lets it read tiles not yet loaded (NaN).
  for (;;) {
    int next = -1;
    bool all_done = true;
    for (int x = 0; x < threads && next < 0; ++x) {
      const int t = ascending ? x : threads - 1 - x;
      const Block::Thread& th = b.threads[static_cast<size_t>(t)];
      if (th.done) continue;
      all_done = false;
      if (!th.waiting || th.waiting->gen != th.wait_gen) next = t;
    }
    if (all_done) break;
    if (next < 0) throw std::runtime_error("emulated block deadlocked: a barrier not every thread reaches");
    b.current = next;
    g_thread_idx = b.threads[static_cast<size_t>(next)].idx;
    swapcontext(&b.main, &b.threads[static_cast<size_t>(next)].ctx);
  }
  g_block = nullptr;
}

// Every block of `grid`, in order, over `smem` poisoned with 0xff bytes (NaN in float, bfloat16
// and float16) first; the low threads run ahead in half the blocks, the high ones in the others.
inline void launch(dim3 grid, int threads, unsigned char* smem, size_t smem_bytes, const std::function<void()>& body) {
  for (unsigned y = 0; y < grid.y; ++y) {
    for (unsigned x = 0; x < grid.x; ++x) {
      if (smem) std::memset(smem, 0xff, smem_bytes);
      run_block(grid, make_uint3(x, y, 0), threads, (x + y) % 2 == 0, body);
    }
  }
}

inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

}  // namespace hg::emu

// The built-in variables and intrinsics the kernels use.
#define threadIdx (::hg::emu::g_thread_idx)
#define blockIdx (::hg::emu::g_block_idx)
#define gridDim (::hg::emu::g_grid_dim)
#define blockDim (::hg::emu::g_block_dim)

inline void __syncthreads() { hg::emu::wait(hg::emu::g_block->all); }
inline void __syncwarp(unsigned = 0xffffffffu) { hg::emu::wait(hg::emu::warp_barrier()); }
template <class V>
V __shfl_xor_sync(unsigned, V v, int lane_mask) {
  auto& ex = hg::emu::g_block->exchange;
  const unsigned t = hg::emu::g_thread_idx.x, base = t / 32 * 32, lane = t % 32;
  hg::emu::wait(hg::emu::warp_barrier());  // everyone has read the previous shuffle
  ex[t] = static_cast<double>(v);
  hg::emu::wait(hg::emu::warp_barrier());
  return static_cast<V>(ex[base + (lane ^ static_cast<unsigned>(lane_mask))]);
}

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

// A whole 16x16 tile, row-major in x, the same in every lane: element-wise updates that depend
// only on an element's (row, col), all the kernels do with .x, come out as on the GPU.
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int num_elements = 256;
  float x[256];
};

namespace detail {
// A warp-collective operation: between warp barriers, lane 0 computes fragment f (f reads shared
// memory or other fragments) and the other lanes copy it.
template <class Frag, class F>
void produce(Frag& f, F&& compute) {
  const unsigned t = hg::emu::g_thread_idx.x;
  const float*& slot = hg::emu::g_block->publish[t / 32];
  __syncwarp();
  if (t % 32 == 0) {
    compute();
    slot = f.x;
  }
  __syncwarp();
  if (t % 32 != 0) std::memcpy(f.x, slot, sizeof f.x);
  __syncwarp();
}
// A warp-collective store: lane 0 writes (every lane holds the same tile).
template <class F>
void collective(F&& f) {
  __syncwarp();
  if (hg::emu::g_thread_idx.x % 32 == 0) f();
  __syncwarp();
}
}  // namespace detail

template <class Use, class T, class Layout, class P>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const P* p, unsigned ldm) {
  detail::produce(f, [&] {
    // matrix_a is (row, k), matrix_b is (k, col); either way element (r, c) of the tile.
    for (unsigned r = 0; r < 16; ++r)
      for (unsigned c = 0; c < 16; ++c)
        f.x[r * 16 + c] = hg::emu::to_float(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
  });
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  detail::produce(f, [&] {
    for (unsigned r = 0; r < 16; ++r)
      for (unsigned c = 0; c < 16; ++c) f.x[r * 16 + c] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
  });
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  detail::collective([&] {
    for (unsigned r = 0; r < 16; ++r)
      for (unsigned c = 0; c < 16; ++c) (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * 16 + c];
  });
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  detail::produce(f, [&] {
    for (float& x : f.x) x = v;
  });
}

// d = a b + c, each sum taken in k order (float products of 16-bit values are exact).
template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  detail::produce(d, [&] {
    float out[256];
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float acc = c.x[m * 16 + n];
        for (int k = 0; k < 16; ++k) acc += a.x[m * 16 + k] * b.x[k * 16 + n];
        out[m * 16 + n] = acc;
      }
    std::memcpy(d.x, out, sizeof out);
  });
}

}  // namespace nvcuda::wmma
