// Built with oneDNN only (HG_HAVE_ONEDNN); see conv/weight_pack.h.
#if HG_HAVE_ONEDNN

#include "kernels/cpu/conv/weight_pack.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/simd/convert.h"

namespace hg::cpu::onednn_conv {

namespace {
constexpr int64_t kMaxTaps = 64;  // kernels up to 8x8; larger ones take oneDNN's reorder
}  // namespace

PackedLayout packed_layout(const dnnl::memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.ndims != 4 || d.data_type != dnnl_bf16 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0)
    return PackedLayout::None;
  for (int i = 0; i < 4; ++i)
    if (d.padded_dims[i] != d.dims[i] || d.padded_offsets[i] != 0) return PackedLayout::None;
  if (d.dims[2] * d.dims[3] > kMaxTaps) return PackedLayout::None;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const int64_t o = d.dims[0], in = d.dims[1];
  if (b.inner_nblks == 2 && b.inner_idxs[0] == 0 && b.inner_idxs[1] == 1 && b.inner_blks[1] == 2 &&
      b.inner_blks[0] % 16 == 0 && o % b.inner_blks[0] == 0 && in % 2 == 0)
    return PackedLayout::Forward;
  return PackedLayout::None;
}

bool pack_bf16_weights(const uint16_t* src, const dnnl::memory::desc& desc, void* dst) {
  const PackedLayout layout = packed_layout(desc);
  if (layout == PackedLayout::None) return false;
  const dnnl_memory_desc_t& d = desc.data;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const int64_t o = d.dims[0], in = d.dims[1], kh = d.dims[2], kw = d.dims[3], k = kh * kw;
  const int64_t* st = b.strides;  // in values, of the outer (blocked) indices
  uint16_t* out = static_cast<uint16_t*>(dst);
  // Output channels' rows lie in * k values apart (9 KiB for 512 channels of 3x3), so reading a
  // few values from each of X rows at a time kept X lines in a handful of L1 sets. Instead each
  // X-row slab of 16 input pairs is first copied into a contiguous tile (row by row, in order),
  // and the words are made from the tile: per tap, a run of 16 x X consecutive words.
  // (AVX-512 gathers of 16 words straight from the source were slower than oneDNN's reorder on the
  // Zen 4.) Word (o % X) of the run at [o / X][i / 2][h][w] pairs inputs i, i + 1 of output o.
  constexpr int64_t kPairs = 16;
  const int64_t x = b.inner_blks[0];
  thread_local std::vector<uint16_t> tile;
  for (int64_t ob = 0; ob < o / x; ++ob)
    for (int64_t ip0 = 0; ip0 < in / 2; ip0 += kPairs) {
      const int64_t pairs = std::min(kPairs, in / 2 - ip0), seg = 2 * pairs * k;
      tile.resize(static_cast<size_t>(x * seg));
      for (int64_t ol = 0; ol < x; ++ol)
        std::memcpy(tile.data() + ol * seg, src + ((ob * x + ol) * in + 2 * ip0) * k,
                    static_cast<size_t>(seg) * sizeof(uint16_t));
      for (int64_t t = 0; t < k; ++t) {
        uint16_t* run = out + ob * st[0] + ip0 * st[1] + t / kw * st[2] + t % kw * st[3];
        for (int64_t ip = 0; ip < pairs; ++ip) {
          uint32_t* words = reinterpret_cast<uint32_t*>(run + ip * st[1]);
          const uint16_t* lo = tile.data() + 2 * ip * k + t;  // input 2 ip's tap t; 2 ip + 1's is k further
          for (int64_t ol = 0; ol < x; ++ol) words[ol] = lo[ol * seg] | static_cast<uint32_t>(lo[ol * seg + k]) << 16;
        }
      }
    }
  return true;
}

namespace {

// Each 16 x 16 x k block is read in order into a [16 o][16 i][k] copy in L1, whose rows are then
// whole runs of the output (16 x k values each), copied or rounded out in order. oneDNN's generic
// reorder took this layout run by run of k values and was the slowest of a ResNet-18 step's
// reorders; reading the block by output row instead (a stride of 1 KiB) kept 144 lines in four L1
// sets and took 7% of the bf16 step; AVX-512 gathers by output row were slower still on the Zen 4.
template <class T>
void unblock(const float* __restrict blocks, T* __restrict out, int64_t o, int64_t in, int64_t k) {
  const int64_t ib_count = in / 16, run = 16 * k;  // one output channel's run in a block
  thread_local std::vector<float> local;
  local.resize(static_cast<size_t>(16 * run));
  float* __restrict lo = local.data();
  for (int64_t ob = 0; ob < o / 16; ++ob) {
    for (int64_t ib = 0; ib < ib_count; ++ib) {
      const float* block = blocks + (ob * ib_count + ib) * k * 256;
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t ii = 0; ii < 16; ++ii) {
          const float* from = block + (kk * 16 + ii) * 16;
          float* to = lo + ii * k + kk;
          for (int64_t oo = 0; oo < 16; ++oo) to[oo * run] = from[oo];
        }
      for (int64_t oo = 0; oo < 16; ++oo) {
        T* dst = out + ((ob * 16 + oo) * in + ib * 16) * k;
        if constexpr (std::is_same_v<T, float>)
          std::memcpy(dst, lo + oo * run, static_cast<size_t>(run) * sizeof(float));
        else
          store_run(lo + oo * run, dst, run);
      }
    }
  }
}

}  // namespace

void unblock_filter_gradient(const float* blocks, float* out, int64_t o, int64_t in, int64_t k) {
  unblock(blocks, out, o, in, k);
}
void unblock_filter_gradient(const float* blocks, BFloat16* out, int64_t o, int64_t in, int64_t k) {
  unblock(blocks, out, o, in, k);
}

}  // namespace hg::cpu::onednn_conv

#endif  // HG_HAVE_ONEDNN
