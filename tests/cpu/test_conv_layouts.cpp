// halfgrad's own layout moves for the CPU convolution (kernels/cpu/conv/layouts.h): the
// bfloat16 weight packing and the activation transpositions against oneDNN's own reorder into
// the same layouts, bit for bit, and the layouts each leaves to oneDNN; the weight-gradient
// unblocking against the layout's index formula.
#include "helpers.h"

#if HG_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/conv/layouts.h"

using dnnl::memory;
using hg::cpu::onednn_conv::pack_bf16_weights;
using hg::cpu::onednn_conv::packed_layout;
using hg::cpu::onednn_conv::PackedLayout;
using Tag = memory::format_tag;

namespace {

// OIHW bfloat16 values whose bits all differ (a hash of the index), NaN patterns included: the
// packing moves bits, it never reads them as numbers.
std::vector<uint16_t> distinct_bits(int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 40503u) ^ (i >> 16));
  return v;
}

std::vector<char> by_reorder(const std::vector<uint16_t>& src, const memory::dims& dims, const memory::desc& to,
                             Tag src_tag = Tag::abcd) {
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::vector<char> out(to.get_size());
  memory from(memory::desc(dims, memory::data_type::bf16, src_tag), engine, const_cast<uint16_t*>(src.data()));
  memory dst(to, engine, out.data());
  dnnl::reorder(from, dst).execute(stream, from, dst);
  stream.wait();
  return out;
}

}  // namespace

TEST_CASE("bf16 weight packing: every layout it takes, from OIHW and OHWI, equals oneDNN's reorder bit for bit") {
  struct Case {
    memory::dims dims;
    Tag tag;
    PackedLayout layout;
  };
  const Case cases[] = {
      {{64, 64, 3, 3}, Tag::AcdB64a2b, PackedLayout::Forward},
      {{512, 256, 3, 3}, Tag::AcdB32a2b, PackedLayout::Forward},
      {{32, 18, 3, 3}, Tag::AcdB32a2b, PackedLayout::Forward},
      {{48, 6, 2, 3}, Tag::AcdB16a2b, PackedLayout::Forward},
      {{128, 64, 1, 1}, Tag::AcdB64a2b, PackedLayout::Forward},
      {{64, 40, 3, 3}, Tag::AcdB64a2b, PackedLayout::Forward},  // 20 input pairs: a slab of 16, then 4
      {{32, 48, 1, 5}, Tag::AcdB32a2b, PackedLayout::Forward},
      {{32, 16, 5, 5}, Tag::AcdB32a2b, PackedLayout::Forward},  // 25 taps: one word at a time
  };
  for (const Case& c : cases) {
    CAPTURE(c.dims[0]);
    CAPTURE(c.dims[1]);
    CAPTURE(static_cast<int>(c.tag));
    const memory::desc desc(c.dims, memory::data_type::bf16, c.tag);
    REQUIRE(packed_layout(desc) == c.layout);
    const auto src = distinct_bits(c.dims[0] * c.dims[1] * c.dims[2] * c.dims[3]);
    for (const bool ohwi : {false, true}) {  // the source OIHW, or a channels-last weight's OHWI
      CAPTURE(ohwi);
      std::vector<char> packed(desc.get_size(), 0x5a);
      REQUIRE(pack_bf16_weights(src.data(), ohwi, desc, packed.data()));
      const std::vector<char> want = by_reorder(src, c.dims, desc, ohwi ? Tag::acdb : Tag::abcd);
      CHECK(std::memcmp(packed.data(), want.data(), want.size()) == 0);
    }
  }
}

TEST_CASE("bf16 weight packing leaves other layouts, large kernels, padded blocks, float32 and groups to oneDNN") {
  const memory::desc not_paired({64, 64, 3, 3}, memory::data_type::bf16, Tag::ABcd16b16a);
  const memory::desc output_pairs({64, 64, 3, 3}, memory::data_type::bf16, Tag::ABcd8a16b2a);
  const memory::desc large_kernel({32, 16, 9, 9}, memory::data_type::bf16, Tag::AcdB32a2b);  // 81 taps
  const memory::desc padded({512, 256, 1, 1}, memory::data_type::bf16, Tag::AcdB48a2b);      // 512 = 10 2/3 blocks
  const memory::desc odd_inputs({32, 3, 3, 3}, memory::data_type::bf16, Tag::AcdB32a2b);
  const memory::desc float32({64, 64, 3, 3}, memory::data_type::f32, Tag::AcdB64a2b);
  const memory::desc grouped({2, 32, 32, 3, 3}, memory::data_type::bf16, Tag::abcde);
  for (const memory::desc* d : {&not_paired, &output_pairs, &large_kernel, &padded, &odd_inputs, &float32, &grouped}) {
    CHECK(packed_layout(*d) == PackedLayout::None);
    std::vector<char> out(d->get_size(), 0x5a);
    const auto src = distinct_bits(static_cast<int64_t>(d->get_size() / 2));
    CHECK_FALSE(pack_bf16_weights(src.data(), false, *d, out.data()));
    CHECK_FALSE(pack_bf16_weights(src.data(), true, *d, out.data()));
    CHECK(out[0] == 0x5a);  // nothing written
  }
}

TEST_CASE(
    "weight-gradient unblocking: ABcd16b16a blocks into OIHW and OHWI, float32, bfloat16 and bfloat16 widened, several "
    "tap counts") {
  struct Case {
    int64_t o, in, k;
  };
  for (const Case& c : {Case{16, 16, 9}, Case{32, 48, 9}, Case{48, 16, 1}, Case{16, 32, 25}, Case{64, 64, 4}}) {
    CAPTURE(c.o);
    CAPTURE(c.in);
    CAPTURE(c.k);
    const int64_t n = c.o * c.in * c.k;
    std::vector<float> blocks(static_cast<size_t>(n)), out(static_cast<size_t>(n), -1.0f);
    std::vector<hg::BFloat16> blocks16(static_cast<size_t>(n)), out16(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      blocks[static_cast<size_t>(i)] = static_cast<float>(i);
      blocks16[static_cast<size_t>(i)] = hg::BFloat16::from_bits(static_cast<uint16_t>(i * 40503u));
    }
    for (const bool ohwi : {false, true}) {
      CAPTURE(ohwi);
      hg::cpu::onednn_conv::unblock_filter_gradient(blocks.data(), out.data(), c.o, c.in, c.k, ohwi);
      hg::cpu::onednn_conv::unblock_filter_gradient(blocks16.data(), out16.data(), c.o, c.in, c.k, ohwi);
      std::vector<float> widened(static_cast<size_t>(n), -1.0f);  // bfloat16 blocks widened while unblocked
      hg::cpu::onednn_conv::unblock_filter_gradient(blocks16.data(), widened.data(), c.o, c.in, c.k, ohwi);
      int64_t wrong = 0;
      for (int64_t o = 0; o < c.o; ++o)
        for (int64_t i = 0; i < c.in; ++i)
          for (int64_t t = 0; t < c.k; ++t) {
            const int64_t from = ((o / 16 * (c.in / 16) + i / 16) * c.k + t) * 256 + i % 16 * 16 + o % 16;
            const int64_t to = ohwi ? (o * c.k + t) * c.in + i : (o * c.in + i) * c.k + t;
            wrong += out[static_cast<size_t>(to)] != blocks[static_cast<size_t>(from)];
            wrong += out16[static_cast<size_t>(to)].bits != blocks16[static_cast<size_t>(from)].bits;
            uint32_t bits = 0;
            std::memcpy(&bits, &widened[static_cast<size_t>(to)], sizeof bits);
            wrong += bits != static_cast<uint32_t>(blocks16[static_cast<size_t>(from)].bits) << 16;
          }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("activation transposition NCHW <-> NHWC equals oneDNN's reorder bit for bit; other layouts are left to it") {
  using hg::cpu::onednn_conv::transpose_activations;
  const auto bf16 = memory::data_type::bf16;
  for (const memory::dims& dims : {memory::dims{2, 32, 4, 8}, memory::dims{1, 16, 16, 1}, memory::dims{3, 64, 2, 8}}) {
    CAPTURE(dims[1]);
    const auto src = distinct_bits(dims[0] * dims[1] * dims[2] * dims[3]);
    for (const auto& [from_tag, to_tag] : {std::pair{Tag::nchw, Tag::nhwc}, std::pair{Tag::nhwc, Tag::nchw}}) {
      const memory::desc from(dims, bf16, from_tag), to(dims, bf16, to_tag);
      std::vector<char> got(to.get_size(), 0x5a), want(to.get_size());
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      dnnl::stream stream(engine);
      memory a(from, engine, const_cast<uint16_t*>(src.data())), b(to, engine, want.data());
      dnnl::reorder(a, b).execute(stream, a, b);
      stream.wait();
#if defined(__AVX512F__)
      REQUIRE(transpose_activations(from, to, src.data(), got.data()));
      CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
#else
      CHECK_FALSE(transpose_activations(from, to, src.data(), got.data()));  // AVX-512 only
#endif
    }
  }
  const memory::dims dims{2, 32, 4, 8}, odd_channels{2, 24, 4, 8}, odd_pixels{2, 32, 3, 4};
  const std::pair<memory::desc, memory::desc> declined[] = {
      {memory::desc(odd_channels, bf16, Tag::nchw), memory::desc(odd_channels, bf16, Tag::nhwc)},
      {memory::desc(odd_pixels, bf16, Tag::nchw), memory::desc(odd_pixels, bf16, Tag::nhwc)},
      {memory::desc(dims, memory::data_type::f32, Tag::nchw), memory::desc(dims, memory::data_type::f32, Tag::nhwc)},
      {memory::desc(dims, bf16, Tag::nchw), memory::desc(dims, bf16, Tag::nchw)},
      {memory::desc(dims, bf16, Tag::nchw), memory::desc(dims, bf16, Tag::nChw16c)},
  };
  const auto src = distinct_bits(2 * 32 * 4 * 8);
  for (const auto& [from, to] : declined) {
    std::vector<char> out(to.get_size(), 0x5a);
    CHECK_FALSE(transpose_activations(from, to, src.data(), out.data()));
    CHECK(out[0] == 0x5a);
  }
}

#else
TEST_CASE("bf16 weight packing" * doctest::skip()) {}
#endif
