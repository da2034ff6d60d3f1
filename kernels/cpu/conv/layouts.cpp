// Built with oneDNN only (HG_HAVE_ONEDNN); see conv/layouts.h.
#if HG_HAVE_ONEDNN

#include "kernels/cpu/conv/layouts.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/simd/transpose16.h"
#include "kernels/cpu/thread_pool.h"

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12 flags the undefined pass-through operands inside its own AVX-512 intrinsics as "may be
// used uninitialized" once they are inlined (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace hg::cpu::onednn_conv {

namespace {

constexpr int64_t kMaxTaps = 64;  // kernels up to 8x8; larger ones take oneDNN's reorder

#if defined(__AVX512F__)
// A row of 16 values as load_row left them (16-bit ones zero-extended to 32 bits), made ready to
// store as Out: unchanged, or bfloat16 bits shifted into float32's (an exact widening).
template <class T, class Out>
inline __m512i widen_row(__m512i v) {
  if constexpr (std::is_same_v<T, uint16_t> && std::is_same_v<Out, float>) return _mm512_slli_epi32(v, 16);
  return v;
}

// 16 words of tap-pairs: word t (t < k <= 16) is lo[t] | hi[t] << 16; words from k on are 0.
inline __m512i pair_words(const uint16_t* lo, const uint16_t* hi, __mmask16 taps) {
  const __m512i a = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(taps, lo));
  const __m512i b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(taps, hi));
  return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
}
#endif

}  // namespace

PackedLayout packed_layout(const dnnl::memory::desc& desc) {
  const dnnl_memory_desc_t& d = desc.data;
  if (d.ndims != 4 || d.data_type != dnnl_bf16 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0)
    return PackedLayout::None;
  for (int i = 0; i < 4; ++i)
    if (d.padded_dims[i] != d.dims[i] || d.padded_offsets[i] != 0) return PackedLayout::None;
  const int64_t taps = d.dims[2] * d.dims[3];
  if (taps > kMaxTaps) return PackedLayout::None;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const int64_t o = d.dims[0], in = d.dims[1];
  if (b.inner_nblks == 2 && b.inner_idxs[0] == 0 && b.inner_idxs[1] == 1 && b.inner_blks[1] == 2 &&
      b.inner_blks[0] % 16 == 0 && o % b.inner_blks[0] == 0 && in % 2 == 0)
    return PackedLayout::Forward;
  return PackedLayout::None;
}

namespace {

// Forward: word (o % X) of the run at [o / X][i / 2][h][w] pairs inputs i, i + 1 of output o.
// Output channels' rows lie in * k values apart (9 KiB for 512 channels of 3x3), so reading a few
// values from each of X rows at a time kept X lines in a handful of L1 sets. Instead each X-row
// slab of 16 input pairs is first copied into a contiguous tile (row by row, in order), and the
// words are made from the tile. On AVX-512, per 16 output channels and input pair, each channel's
// k words (its two inputs' taps, paired) are one register, and a 16 x 16 transposition turns them
// into one register of 16 channels per tap; elsewhere one word at a time.
void pack_forward(const uint16_t* src, uint16_t* out, int64_t o, int64_t in, int64_t kw, int64_t k, int64_t x,
                  const int64_t* st) {
  constexpr int64_t kPairs = 16;
  // Output-channel blocks over the pool: the pass runs before a call's chunks start.
  run_parallel(o / x, [&](int64_t ob) {
    thread_local std::vector<uint16_t> tile;
    for (int64_t ip0 = 0; ip0 < in / 2; ip0 += kPairs) {
      const int64_t pairs = std::min(kPairs, in / 2 - ip0), seg = 2 * pairs * k;
      tile.resize(static_cast<size_t>(x * seg));
      for (int64_t ol = 0; ol < x; ++ol)
        std::memcpy(tile.data() + ol * seg, src + ((ob * x + ol) * in + 2 * ip0) * k,
                    static_cast<size_t>(seg) * sizeof(uint16_t));
      const auto run = [&](int64_t t, int64_t ip) {  // tap t's words of input pair ip0 + ip
        return reinterpret_cast<uint32_t*>(out + ob * st[0] + (ip0 + ip) * st[1] + t / kw * st[2] + t % kw * st[3]);
      };
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
      if (k <= 16) {
        const __mmask16 taps = static_cast<__mmask16>((1u << k) - 1);
        for (int64_t ip = 0; ip < pairs; ++ip)
          for (int64_t o0 = 0; o0 < x; o0 += 16) {
            __m512i r[16];
            for (int64_t ol = 0; ol < 16; ++ol) {
              const uint16_t* lo = tile.data() + (o0 + ol) * seg + 2 * ip * k;
              r[ol] = pair_words(lo, lo + k, taps);
            }
            transpose16x16(r);
            for (int64_t t = 0; t < k; ++t) _mm512_storeu_si512(run(t, ip) + o0, r[t]);
          }
        continue;
      }
#endif
      for (int64_t t = 0; t < k; ++t)
        for (int64_t ip = 0; ip < pairs; ++ip) {
          uint32_t* words = run(t, ip);
          const uint16_t* lo = tile.data() + 2 * ip * k + t;  // input 2 ip's tap t; 2 ip + 1's is k further
          for (int64_t ol = 0; ol < x; ++ol) words[ol] = lo[ol * seg] | static_cast<uint32_t>(lo[ol * seg + k]) << 16;
        }
    }
  });
}

// Forward from OHWI weights (a channels-last model's): output o's run is [k taps][in], so the
// 32-bit word pairing inputs 2 ip, 2 ip + 1 at tap t is word (o k + t) in / 2 + ip, already a pair.
// For each block of X output channels and tap, the [X][in / 2] words are transposed into
// [in / 2][X]: 16 x 16 in registers on AVX-512, one word at a time elsewhere.
void pack_forward_ohwi(const uint16_t* src, uint16_t* out, int64_t o, int64_t in, int64_t kw, int64_t k, int64_t x,
                       const int64_t* st) {
  const auto* words = reinterpret_cast<const uint32_t*>(src);
  const int64_t pairs = in / 2;
  run_parallel(o / x, [&](int64_t ob) {
    for (int64_t t = 0; t < k; ++t) {
      const auto run = [&](int64_t ip) {  // the X words of input pair ip at tap t
        return reinterpret_cast<uint32_t*>(out + ob * st[0] + ip * st[1] + t / kw * st[2] + t % kw * st[3]);
      };
      const auto word = [&](int64_t ol, int64_t ip) { return words + ((ob * x + ol) * k + t) * pairs + ip; };
      int64_t ip0 = 0;
#if defined(__AVX512F__)
      for (; ip0 + 16 <= pairs; ip0 += 16)
        for (int64_t o0 = 0; o0 < x; o0 += 16) {
          __m512i r[16];
          for (int64_t ol = 0; ol < 16; ++ol) r[ol] = _mm512_loadu_si512(word(o0 + ol, ip0));
          transpose16x16(r);
          for (int64_t ip = 0; ip < 16; ++ip) _mm512_storeu_si512(run(ip0 + ip) + o0, r[ip]);
        }
#endif
      for (; ip0 < pairs; ++ip0) {
        uint32_t* w = run(ip0);
        for (int64_t ol = 0; ol < x; ++ol) w[ol] = *word(ol, ip0);
      }
    }
  });
}

}  // namespace

bool pack_bf16_weights(const uint16_t* src, bool ohwi, const dnnl::memory::desc& desc, void* dst) {
  const PackedLayout layout = packed_layout(desc);
  if (layout == PackedLayout::None) return false;
  const dnnl_memory_desc_t& d = desc.data;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const int64_t o = d.dims[0], in = d.dims[1], kw = d.dims[3], k = d.dims[2] * kw;
  uint16_t* out = static_cast<uint16_t*>(dst);
  // strides: in values, of the outer indices
  if (ohwi)
    pack_forward_ohwi(src, out, o, in, kw, k, b.inner_blks[0], b.strides);
  else
    pack_forward(src, out, o, in, kw, k, b.inner_blks[0], b.strides);
  return true;
}

namespace {

// A block is a [k * 16][16 o] matrix whose row kk * 16 + ii holds input ii's tap kk; output
// channel oo's run in OIHW is its column, in the order (ii, kk). So each 16 values of a run are a
// 16 x 16 transposition of 16 of the block's rows, taken in that order: in registers on AVX-512
// (bfloat16 widened to 32 bits for it), read and written in order. oneDNN's generic reorder took
// this layout run by run of k values and was the slowest of a ResNet-18 step's reorders; the
// scalar transposition through an L1 copy below took 4% of the bfloat16 step; AVX-512 gathers by
// output row were slower than either on the Zen 4.
// Out is T, or float for uint16_t blocks of bfloat16 bits (widened exactly: the bits shifted up).
template <class T, class Out = T>
void unblock(const T* __restrict blocks, Out* __restrict out, int64_t o, int64_t in, int64_t k) {
  const int64_t ib_count = in / 16;
#if defined(__AVX512F__)
  for (int64_t ob = 0; ob < o / 16; ++ob)
    for (int64_t ib = 0; ib < ib_count; ++ib) {
      const T* block = blocks + (ob * ib_count + ib) * k * 256;
      Out* first = out + (ob * 16 * in + ib * 16) * k;  // output channel ob * 16's run
      for (int64_t t = 0; t < k; ++t) {
        __m512i r[16];
        for (int64_t jj = 0; jj < 16; ++jj) {
          const int64_t j = 16 * t + jj;  // = ii * k + kk
          r[jj] = load_row(block + (j % k * 16 + j / k) * 16);
        }
        transpose16x16(r);
        for (int64_t oo = 0; oo < 16; ++oo) store_row(first + oo * in * k + 16 * t, widen_row<T, Out>(r[oo]));
      }
    }
#else
  static_assert(std::is_same_v<T, Out>, "widening unblocking is AVX-512 only");
  const int64_t run = 16 * k;  // one output channel's run in a block
  thread_local std::vector<T> local;
  local.resize(static_cast<size_t>(16 * run));
  T* __restrict lo = local.data();
  for (int64_t ob = 0; ob < o / 16; ++ob) {
    for (int64_t ib = 0; ib < ib_count; ++ib) {
      const T* block = blocks + (ob * ib_count + ib) * k * 256;
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t ii = 0; ii < 16; ++ii) {
          const T* from = block + (kk * 16 + ii) * 16;
          T* to = lo + ii * k + kk;
          for (int64_t oo = 0; oo < 16; ++oo) to[oo * run] = from[oo];
        }
      for (int64_t oo = 0; oo < 16; ++oo)
        std::memcpy(static_cast<void*>(out + ((ob * 16 + oo) * in + ib * 16) * k), lo + oo * run,
                    static_cast<size_t>(run) * sizeof(T));
    }
  }
#endif
}

// The same blocks into OHWI `out` (a channels-last weight's gradient): output channel oo's values
// for tap kk are the block's rows kk * 16 .. kk * 16 + 15 read down column oo, so each 16 x 16
// piece of rows is transposed once and its rows written as runs of 16 inputs.
template <class T, class Out = T>
void unblock_ohwi(const T* __restrict blocks, Out* __restrict out, int64_t o, int64_t in, int64_t k) {
  const int64_t ib_count = in / 16;
  for (int64_t ob = 0; ob < o / 16; ++ob)
    for (int64_t ib = 0; ib < ib_count; ++ib) {
      const T* block = blocks + (ob * ib_count + ib) * k * 256;
      for (int64_t kk = 0; kk < k; ++kk) {
        Out* first = out + ((ob * 16) * k + kk) * in + ib * 16;  // output channel ob * 16's run of 16 inputs
#if defined(__AVX512F__)
        __m512i r[16];
        for (int64_t ii = 0; ii < 16; ++ii) r[ii] = load_row(block + (kk * 16 + ii) * 16);
        transpose16x16(r);
        for (int64_t oo = 0; oo < 16; ++oo) store_row(first + oo * k * in, widen_row<T, Out>(r[oo]));
#else
        static_assert(std::is_same_v<T, Out>, "widening unblocking is AVX-512 only");
        for (int64_t ii = 0; ii < 16; ++ii)
          for (int64_t oo = 0; oo < 16; ++oo) first[oo * k * in + ii] = block[(kk * 16 + ii) * 16 + oo];
#endif
      }
    }
}

}  // namespace

bool transpose_activations(const dnnl::memory::desc& from, const dnnl::memory::desc& to, const void* src, void* dst) {
#if defined(__AVX512F__)
  const dnnl_memory_desc_t& d = from.data;
  if (d.ndims != 4 || (d.data_type != dnnl_bf16 && d.data_type != dnnl_f16)) return false;
  const dnnl::memory::dims dims = from.dims();
  const int64_t n = dims[0], c = dims[1], p = dims[2] * dims[3];
  if (c % 16 != 0 || p % 16 != 0 || to.dims() != dims) return false;
  using Tag = dnnl::memory::format_tag;
  const auto dt = from.data_type();
  const dnnl::memory::desc nchw(dims, dt, Tag::nchw), nhwc(dims, dt, Tag::nhwc);
  const bool to_nhwc = from == nchw && to == nhwc, to_nchw = from == nhwc && to == nchw;
  if (!to_nhwc && !to_nchw) return false;
  const auto* in = static_cast<const uint16_t*>(src);
  auto* out = static_cast<uint16_t*>(dst);
  transpose_16bit(in, out, n, to_nhwc ? c : p, to_nhwc ? p : c);
  return true;
#else
  return false;
#endif
}

void unblock_filter_gradient(const float* blocks, float* out, int64_t o, int64_t in, int64_t k, bool ohwi) {
  if (ohwi)
    unblock_ohwi(blocks, out, o, in, k);
  else
    unblock(blocks, out, o, in, k);
}
void unblock_filter_gradient(const BFloat16* blocks, float* out, int64_t o, int64_t in, int64_t k, bool ohwi) {
#if defined(__AVX512F__)
  const auto* from = reinterpret_cast<const uint16_t*>(blocks);
  if (ohwi)
    unblock_ohwi<uint16_t, float>(from, out, o, in, k);
  else
    unblock<uint16_t, float>(from, out, o, in, k);
#else
  // Unblocked in bfloat16, then widened.
  std::vector<BFloat16> narrow(static_cast<size_t>(o * in * k));
  unblock_filter_gradient(blocks, narrow.data(), o, in, k, ohwi);
  for (size_t i = 0; i < narrow.size(); ++i) out[i] = static_cast<float>(narrow[i]);
#endif
}
void unblock_filter_gradient(const BFloat16* blocks, BFloat16* out, int64_t o, int64_t in, int64_t k, bool ohwi) {
  const auto* from = reinterpret_cast<const uint16_t*>(blocks);  // moves bits only
  auto* to = reinterpret_cast<uint16_t*>(out);
  if (ohwi)
    unblock_ohwi(from, to, o, in, k);
  else
    unblock(from, to, o, in, k);
}

}  // namespace hg::cpu::onednn_conv

#endif  // HG_HAVE_ONEDNN
