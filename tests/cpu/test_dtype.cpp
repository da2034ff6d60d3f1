// dtypes: sizes, promotion, and exhaustive float16/bfloat16 conversion checks.
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "helpers.h"

using namespace hg;

namespace {
// Reference decode of a binary16 pattern, in double.
double half_reference(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}
double bf16_reference(uint16_t b) {
  const int sign = (b & 0x8000) ? -1 : 1;
  const int exp = (b >> 7) & 0xff;
  const int mant = b & 0x7f;
  if (exp == 0xff) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -133);
  return sign * std::ldexp(128 + mant, exp - 134);
}

// Checks decode against the reference, encode(decode(x)) == x, and that the midpoint between
// each pattern and the next larger magnitude rounds to the one with an even mantissa.
template <class T>
void check_format(double (*reference)(uint16_t), uint16_t inf_bits) {
  int failures = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const double ref = reference(b);
    const float f = T::to_float(b);
    if (std::isnan(ref)) {
      failures += !std::isnan(f) || !std::isnan(static_cast<float>(T(f)));
      continue;
    }
    failures += static_cast<double>(f) != ref;
    failures += T::from_float(f) != b;
    const uint16_t next = static_cast<uint16_t>(b + 1);
    if ((next & 0x7fff) >= inf_bits) continue;  // no finite neighbour above (overflow tested below)
    const double next_ref = reference(next);
    const auto mid = static_cast<float>((ref + next_ref) / 2);  // exact in float
    const uint16_t even = (b & 1) ? next : b;
    failures += T::from_float(mid) != even;
    // Just off the midpoint goes to the nearer neighbour.
    failures += T::from_float(std::nextafter(mid, static_cast<float>(ref))) != b;
    failures += T::from_float(std::nextafter(mid, static_cast<float>(next_ref))) != next;
  }
  CHECK(failures == 0);
}
}  // namespace

TEST_CASE("float16 conversion: all 65,536 patterns, round to nearest even, subnormals, inf/NaN") {
  check_format<Half>(half_reference, 0x7c00);
  CHECK(Half::from_float(65504.0f) == 0x7bff);
  CHECK(Half::from_float(65520.0f) == 0x7c00);  // halfway to the next binade overflows to inf
  CHECK(Half::from_float(65519.99f) == 0x7bff);
  CHECK(Half::from_float(1e-8f) == 0);        // below half the smallest subnormal
  CHECK(Half::from_float(-1e-8f) == 0x8000);  // keeps the sign
  CHECK(Half::from_float(std::ldexp(1.0f, -24)) == 1);
  CHECK(std::isnan(static_cast<float>(Half(NAN))));
}

TEST_CASE("float16: the portable conversions (device code, CPUs without F16C) agree with the ones in use") {
  // Where the build has F16C, Half converts with it; the portable code must give the same bits
  // (it is what CUDA device code and other CPUs run). NaN patterns: NaN either way.
  int failures = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float f = Half::to_float(b), g = Half::to_float_portable(b);
    failures += std::isnan(f) ? !std::isnan(g) : std::bit_cast<uint32_t>(f) != std::bit_cast<uint32_t>(g);
  }
  // Float patterns across the whole range (ties, subnormals, overflow, NaN payloads).
  for (uint64_t x = 0; x <= 0xffffffffu; x += 0x1003u) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(x));
    failures += Half::from_float(f) != Half::from_float_portable(f);
  }
  CHECK(failures == 0);
}

TEST_CASE("bfloat16 conversion: all 65,536 patterns, round to nearest even, inf/NaN") {
  check_format<BFloat16>(bf16_reference, 0x7f80);
  CHECK(BFloat16::from_float(3.0e38f) == 0x7f62);
  CHECK(std::isinf(static_cast<float>(BFloat16(3.4e38f))));
}

TEST_CASE("dtype sizes, names and promotion follow PyTorch") {
  CHECK(element_size(kFloat16) == 2);
  CHECK(element_size(kInt64) == 8);
  CHECK(dtype_name(kBFloat16) == "bfloat16");
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kInt64, kFloat16) == kFloat16);
  CHECK(promote_types(kInt32, kInt64) == kInt64);
  CHECK(promote_types(kBool, kUInt8) == kUInt8);
  CHECK(promote_types(kFloat32, kFloat64) == kFloat64);
  CHECK(promote_types(kUInt8, kFloat32) == kFloat32);
  CHECK((ones({2}, kFloat16) + ones({2}, kBFloat16)).dtype() == kFloat32);
  CHECK((ones({2}, kInt64) * 2.5).dtype() == kFloat32);
  CHECK((ones({2}, kInt64) * 2.0).dtype() == kInt64);
  CHECK((ones({2}, kFloat16) * 3.0).dtype() == kFloat16);
}

TEST_CASE("to() converts between every pair of dtypes") {
  const std::vector<double> values{0, 1, 2, 3, 96, 1};  // exact in every dtype, float8 included
  for (Dtype from : kAllDtypes) {
    for (Dtype to : kAllDtypes) {
      Tensor t = tensor(values).to(from).to(to);
      CHECK(t.dtype() == to);
      auto back = t.to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i) {
        const double expect = (from == kBool || to == kBool) ? (values[i] != 0) : values[i];
        CHECK_MESSAGE(back[i] == expect, dtype_name(from) << "->" << dtype_name(to));
      }
    }
  }
}

TEST_CASE("item() reads a CPU value as the cast kernel converts it, for every dtype") {
  // item() reads the one value where it lies; to_vector() goes through a cast op. Both must give
  // the same bits: awkward values (rounding, overflow to inf, NaN, an int64 beyond float's
  // integers), and each one as an element of a larger tensor, at an offset, through a view.
  const std::vector<double> values{
      0.0,   -0.0,         1.0,     -2.5, 0.1, 65504.0, 70000.0, 3.4e38, 1e-40, 1e300, 9007199254740993.0,
      -7.75, std::nan(""), INFINITY};
  for (Dtype d : kAllDtypes) {
    for (double v : values) {
      const Tensor source = tensor(std::vector<double>{5.0, v, 7.0}).to(d);
      for (const Tensor& t : {source.slice(0, 1, 2).reshape({}), source.slice(0, 1, 2)}) {
        CAPTURE(dtype_name(d));
        CAPTURE(v);
        const double by_cast = t.to_vector<double>()[0];
        const float by_cast_f = t.to_vector<float>()[0];
        CHECK(std::bit_cast<uint64_t>(t.item<double>()) == std::bit_cast<uint64_t>(by_cast));
        CHECK(std::bit_cast<uint32_t>(t.item<float>()) == std::bit_cast<uint32_t>(by_cast_f));
      }
    }
  }
  // A value the int64 path holds exactly, beyond float's and double's integers.
  const Tensor big = tensor(std::vector<int64_t>{(int64_t{1} << 62) + 1});
  CHECK(big.item<double>() == big.to_vector<double>()[0]);
  CHECK(big.item<float>() == big.to_vector<float>()[0]);
  CHECK_THROWS_WITH_AS(tensor(std::vector<double>{1, 2}).item<double>(), doctest::Contains("item"), Error);
}

TEST_CASE("printing looks like PyTorch's repr") {
  CHECK(tensor(std::vector<float>{1, 2.5}).to_string() == "tensor([1.0000, 2.5000])");
  CHECK(tensor(std::vector<int64_t>{1, 2}).to_string() == "tensor([1, 2])");
  CHECK(ones({2}, kBFloat16).to_string() == "tensor([1.0000, 1.0000], dtype=bfloat16)");
  CHECK(tensor(std::vector<bool>{true, false}).to_string() == "tensor([True, False])");
  CHECK(zeros({0, 3}).to_string() == "tensor([], size=[0, 3])");
  const std::string big = fmt::format("{}", arange(0.0, 2000.0, 1.0, kFloat32));
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 200);
}

TEST_CASE("tensor casts float32 <-> float16/bfloat16 round exactly like the scalar conversions") {
  // The bulk conversions (F16C, vector loops) against hg::Half / hg::BFloat16 one value at a
  // time: every 16-bit pattern widened, and float32 values at and around every rounding tie.
  std::vector<float> narrow_in;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float h = Half::to_float(static_cast<uint16_t>(b)), bf = BFloat16::to_float(static_cast<uint16_t>(b));
    for (float v : {h, bf}) {
      if (!std::isfinite(v)) continue;
      narrow_in.push_back(v);
      narrow_in.push_back(std::nextafter(v, INFINITY));
      narrow_in.push_back(std::nextafter(v, -INFINITY));
    }
  }
  for (float v : {INFINITY, -INFINITY, NAN, 65520.0f, 3.4e38f, FLT_MAX, 1e-8f, -1e-8f}) narrow_in.push_back(v);
  const Tensor f32 = tensor(narrow_in);
  for (Dtype d : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(d));
    // Contiguous (bulk path) and strided (element path) casts.
    for (const Tensor& src : {f32, f32.reshape({-1, 2}).transpose(0, 1)}) {
      const Tensor narrowed = src.to(d).contiguous().to(kFloat32);
      const auto got = narrowed.to_vector<float>(), in = src.contiguous().to_vector<float>();
      size_t bad = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        const float want = d == kFloat16 ? static_cast<float>(Half(in[i])) : static_cast<float>(BFloat16(in[i]));
        const bool same =
            (std::isnan(want) && std::isnan(got[i])) || (want == got[i] && std::signbit(want) == std::signbit(got[i]));
        bad += same ? 0 : 1;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("bulk float32 <-> 16-bit conversions (vector paths) match the scalar ones bit for bit") {
  // Random bit patterns (every class: NaNs with payloads, subnormals, infinities, overflow to
  // inf) plus the edge cases, in a length that is not a multiple of any vector width, and one
  // lone subnormal in an otherwise normal block (the bfloat16 path falls back per block there).
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f800000u,
                                0xff800000u, 0x7f800001u, 0xffc01234u, 0x7f7fffffu, 0x7f7f8000u, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x477ff000u, 0x33000000u, 0xb3000001u};
  uint64_t state = 12345;
  for (int i = 0; i < 100'000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    bits.push_back(static_cast<uint32_t>(state >> 32));
  }
  for (int i = 0; i < 40; ++i) bits.push_back(0x3f800000u + static_cast<uint32_t>(i));
  bits[bits.size() - 20] = 0x00000123u;
  bits.push_back(0x3f800000u);
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), bits.size() * sizeof(float));
  const Tensor x = tensor<float>(values);
  auto check_dtype = [&](Dtype dtype, auto scalar) {
    CAPTURE(dtype_name(dtype));
    const Tensor y = x.to(dtype);
    const auto* out = static_cast<const uint16_t*>(y.raw_data());
    int mismatches = 0;
    for (size_t i = 0; i < values.size(); ++i) mismatches += out[i] != scalar(values[i]);
    CHECK(mismatches == 0);
    // Widening back: every 16-bit pattern decodes exactly as the scalar decoder does.
    const Tensor back = y.to(kFloat32);
    const auto* wide = static_cast<const uint32_t*>(back.raw_data());
    int wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t want = 0;
      const float f = dtype == kBFloat16 ? BFloat16::to_float(out[i]) : Half::to_float(out[i]);
      std::memcpy(&want, &f, sizeof want);
      wrong += wide[i] != want;
    }
    CHECK(wrong == 0);
  };
  check_dtype(kBFloat16, [](float f) { return BFloat16::from_float(f); });
  check_dtype(kFloat16, [](float f) { return Half::from_float(f); });
}
