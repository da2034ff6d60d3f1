// The float8 dtypes: every code decoded, the encodings of tests/tools/fp8_reference.py (exact
// rationals), a float32 sweep against a slow search reference, casts between every dtype,
// printing, safetensors, and the generic ops refusing them by name.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp8_reference_table.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

namespace {

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
float f32_from(uint32_t b) { return std::bit_cast<float>(b); }

// An fp8 tensor holding the given codes.
Tensor fp8_tensor(const std::vector<uint8_t>& codes, Dtype dtype) {
  Tensor t = empty({static_cast<int64_t>(codes.size())}, dtype);
  if (!codes.empty()) std::memcpy(t.raw_data(), codes.data(), codes.size());
  return t;
}
std::vector<uint8_t> codes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.numel());
}

// The slow reference, written apart from framework/float8.h's bit arithmetic: the finite values
// of a format built from their fields with ldexp, sorted; a value is placed between two of them
// by binary search and rounded by comparing 2|x| with lo + hi (exact in double), ties to the
// even code. `beyond` is the grid's next point past the largest finite value.
struct SlowFormat {
  int mant_bits;
  int bias;
  bool has_inf;
  std::vector<double> values;  // finite, non-negative, ascending
  std::vector<uint8_t> codes;
  double beyond;

  SlowFormat(int exp_bits, int mant, int b, bool inf) : mant_bits(mant), bias(b), has_inf(inf) {
    const int top = (1 << exp_bits) - 1;
    for (int e = 0; e <= top; ++e) {
      for (int m = 0; m < (1 << mant); ++m) {
        if (inf && e == top) continue;
        if (!inf && e == top && m == (1 << mant) - 1) continue;
        const double v = e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp((1 << mant) + m, e - bias - mant);
        values.push_back(v);
        codes.push_back(static_cast<uint8_t>((e << mant) | m));
      }
    }
    beyond = 2 * values.back() - values[values.size() - 2];
  }

  uint8_t encode(float x, bool saturate) const {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    const uint8_t max_code = codes.back();
    const uint8_t overflow = saturate ? max_code : (has_inf ? 0x7c : 0x7f);
    if (std::isnan(x)) return sign | 0x7f;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= beyond) return sign | overflow;
    const auto above = std::upper_bound(values.begin(), values.end(), a);  // first value > a
    const size_t lo = static_cast<size_t>(above - values.begin()) - 1;
    if (values[lo] == a) return sign | codes[lo];
    const double hi_v = lo + 1 < values.size() ? values[lo + 1] : beyond;
    const uint8_t hi_c = lo + 1 < values.size() ? codes[lo + 1] : overflow;
    const double twice = 2 * a, sum = values[lo] + hi_v;
    if (twice < sum) return sign | codes[lo];
    if (twice > sum) return sign | hi_c;
    return sign | ((codes[lo] & 1) ? hi_c : codes[lo]);
  }
};

const SlowFormat& slow_e4m3() {
  static const SlowFormat f(4, 3, 7, false);
  return f;
}
const SlowFormat& slow_e5m2() {
  static const SlowFormat f(5, 2, 15, true);
  return f;
}

// Compares the fast encoders with the slow reference on one float; counts mismatches.
int check_against_slow(float x) {
  int bad = 0;
  bad += Float8E4M3::from_float(x) != slow_e4m3().encode(x, false);
  bad += Float8E5M2::from_float(x) != slow_e5m2().encode(x, false);
  bad += Float8E4M3::from_float_saturate(x) != slow_e4m3().encode(x, true);
  bad += Float8E5M2::from_float_saturate(x) != slow_e5m2().encode(x, true);
  if (bad)
    FAIL_CHECK(
        fmt::format("float bits {:#010x} ({}): the fast encoders disagree with the slow reference", f32_bits(x), x));
  return bad;
}

bool same_float(float a, uint32_t expected_bits) {
  const float e = f32_from(expected_bits);
  if (std::isnan(e)) return std::isnan(a) && std::signbit(a) == std::signbit(e);
  return f32_bits(a) == expected_bits;
}

}  // namespace

TEST_CASE("fp8: the dtypes' sizes, names and traits") {
  CHECK(element_size(kFloat8E4M3) == 1);
  CHECK(element_size(kFloat8E5M2) == 1);
  CHECK(dtype_name(kFloat8E4M3) == "float8_e4m3fn");
  CHECK(dtype_name(kFloat8E5M2) == "float8_e5m2");
  CHECK(is_floating(kFloat8E4M3));
  CHECK(is_float8(kFloat8E5M2));
  CHECK(!is_float8(kBFloat16));
  CHECK(!is_reduced_float(kFloat8E4M3));
  CHECK(dtype_of<Float8E4M3> == kFloat8E4M3);
  CHECK(promote_types(kFloat8E4M3, kFloat8E4M3) == kFloat8E4M3);
  check_error([] { (void)promote_types(kFloat8E4M3, kFloat32); }, {"float8_e4m3fn", "float32", "to()"});
  check_error([] { (void)promote_types(kFloat8E4M3, kFloat8E5M2); }, {"float8_e4m3fn", "float8_e5m2"});
}

TEST_CASE("fp8: all 256 codes of each format decode exactly, directly and through to()") {
  std::vector<uint8_t> all(256);
  for (int c = 0; c < 256; ++c) all[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    CHECK(same_float(Float8E4M3::to_float(static_cast<uint8_t>(c)), hg_fp8_reference::kDecodeE4M3[c]));
    CHECK(same_float(Float8E5M2::to_float(static_cast<uint8_t>(c)), hg_fp8_reference::kDecodeE5M2[c]));
  }
  for (Dtype d : {kFloat8E4M3, kFloat8E5M2}) {
    const uint32_t* ref = d == kFloat8E4M3 ? hg_fp8_reference::kDecodeE4M3 : hg_fp8_reference::kDecodeE5M2;
    const Tensor t = fp8_tensor(all, d);
    const auto as_f32 = t.to(kFloat32).to_vector<float>();
    const auto as_f64 = t.to(kFloat64).to_vector<double>();
    const auto as_bf16 = t.to(kBFloat16).to(kFloat32).to_vector<float>();  // exact: fp8 fits in bf16
    const auto as_f16 = t.to(kFloat16).to(kFloat32).to_vector<float>();    // and in float16
    for (size_t c = 0; c < 256; ++c) {
      CAPTURE(dtype_name(d));
      CAPTURE(c);
      CHECK(same_float(as_f32[c], ref[c]));
      CHECK(same_float(static_cast<float>(as_f64[c]), ref[c]));
      CHECK(same_float(as_bf16[c], ref[c]));
      CHECK(same_float(as_f16[c], ref[c]));
      CHECK(same_float(t.slice(0, static_cast<int64_t>(c), static_cast<int64_t>(c) + 1).item<float>(), ref[c]));
    }
    // Every non-NaN code survives a round trip through each wider float dtype.
    for (Dtype wide : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      const auto back = codes_of(t.to(wide).to(d));
      for (size_t c = 0; c < 256; ++c)
        if (!std::isnan(f32_from(ref[c]))) CHECK_MESSAGE(back[c] == c, dtype_name(d) << " via " << dtype_name(wide));
    }
  }
}

TEST_CASE("fp8: encodings match the exact-rational table (boundaries, ties, subnormals, overflow, NaN)") {
  std::vector<float> inputs;
  for (const auto& row : hg_fp8_reference::kEncode) {
    const float x = f32_from(row.f32);
    CAPTURE(row.f32);
    CHECK(Float8E4M3::from_float(x) == row.e4m3);
    CHECK(Float8E5M2::from_float(x) == row.e5m2);
    CHECK(Float8E4M3::from_float_saturate(x) == row.e4m3_sat);
    CHECK(Float8E5M2::from_float_saturate(x) == row.e5m2_sat);
    inputs.push_back(x);
  }
  // The tensor casts give the same codes, from float32 and, where the input is exact in them,
  // from bfloat16 and float16.
  const Tensor f32 = tensor(inputs);
  const auto e4 = codes_of(f32.to(kFloat8E4M3));
  const auto e5 = codes_of(f32.to(kFloat8E5M2));
  const auto via_bf16 = f32.to(kBFloat16);
  const auto via_f16 = f32.to(kFloat16);
  const auto bf16_exact = via_bf16.to(kFloat32).to_vector<float>();
  const auto f16_exact = via_f16.to(kFloat32).to_vector<float>();
  const auto e4_bf16 = codes_of(via_bf16.to(kFloat8E4M3)), e5_bf16 = codes_of(via_bf16.to(kFloat8E5M2));
  const auto e4_f16 = codes_of(via_f16.to(kFloat8E4M3)), e5_f16 = codes_of(via_f16.to(kFloat8E5M2));
  size_t from_bf16 = 0, from_f16 = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& row = hg_fp8_reference::kEncode[i];
    CAPTURE(row.f32);
    CHECK(e4[i] == row.e4m3);
    CHECK(e5[i] == row.e5m2);
    if (f32_bits(bf16_exact[i]) == row.f32) {
      ++from_bf16;
      CHECK(e4_bf16[i] == row.e4m3);
      CHECK(e5_bf16[i] == row.e5m2);
    }
    if (f32_bits(f16_exact[i]) == row.f32) {
      ++from_f16;
      CHECK(e4_f16[i] == row.e4m3);
      CHECK(e5_f16[i] == row.e5m2);
    }
  }
  CHECK(from_bf16 > 500);  // the table's codes and midpoints are exact in bfloat16
  CHECK(from_f16 > 500);
}

TEST_CASE("fp8: the semantics spelled out (E4M3 overflows to NaN, E5M2 to infinity, saturation)") {
  CHECK(Float8E4M3::from_float(448.0f) == 0x7e);
  CHECK(Float8E4M3::from_float(464.0f) == 0x7e);                          // a tie: to the even 448
  CHECK(Float8E4M3::from_float(std::nextafter(464.0f, 1e9f)) == 0x7f);    // past it: NaN
  CHECK(Float8E4M3::from_float(-INFINITY) == 0xff);                       // no infinity: NaN
  CHECK(Float8E4M3::from_float_saturate(-1e30f) == 0xfe);                 // -448
  CHECK(Float8E4M3::from_float(0x1p-10f) == 0x00);                        // half the smallest: even
  CHECK(Float8E4M3::from_float(std::nextafter(0x1p-10f, 1.0f)) == 0x01);  // 2^-9
  CHECK(Float8E4M3::from_float(-0.0f) == 0x80);
  CHECK(Float8E5M2::from_float(57344.0f) == 0x7b);
  CHECK(Float8E5M2::from_float(61440.0f) == 0x7c);  // a tie: to the even infinity
  CHECK(Float8E5M2::from_float(std::nextafter(61440.0f, 0.0f)) == 0x7b);
  CHECK(Float8E5M2::from_float(INFINITY) == 0x7c);
  CHECK(Float8E5M2::from_float_saturate(INFINITY) == 0x7b);
  CHECK(Float8E5M2::from_float(std::nanf("")) == 0x7f);
  CHECK(std::isnan(Float8E5M2::to_float(Float8E5M2::from_float_saturate(std::nanf("")))));
  // The recipe's scaled cast: x * scale, saturated.
  CHECK(cast_to_float8_saturated<Float8E4M3>(100.0f, 8.0f).bits == 0x7e);
  CHECK(static_cast<float>(cast_to_float8_saturated<Float8E4M3>(3.0f, 0.5f)) == 1.5f);
  CHECK(static_cast<float>(cast_to_float8_saturated<Float8E5M2>(-3.0f, 1e6f)) == -57344.0f);
}

TEST_CASE("fp8: the fast encoders agree with a slow search over a float32 sweep") {
  int bad = 0;
  // Every 997th float32 pattern (4.3 million), all signs and exponents.
  for (uint64_t b = 0; b <= 0xffffffffu && bad < 20; b += 997)
    bad += check_against_slow(f32_from(static_cast<uint32_t>(b)));
  // Every float32 within 64 ulps of each point and each midpoint of both grids.
  for (const SlowFormat* f : {&slow_e4m3(), &slow_e5m2()}) {
    std::vector<double> points = f->values;
    points.push_back(f->beyond);
    const size_t n = points.size();
    for (size_t i = 0; i + 1 < n; ++i) points.push_back((points[i] + points[i + 1]) / 2);
    for (double p : points) {
      const uint32_t centre = f32_bits(static_cast<float>(p));
      for (int d = -64; d <= 64 && bad < 20; ++d) {
        const uint32_t b = centre + static_cast<uint32_t>(d);
        if (b > 0x7f800000u) continue;
        bad += check_against_slow(f32_from(b));
        bad += check_against_slow(-f32_from(b));
      }
    }
  }
  // Every bfloat16 and float16 value through the tensor casts.
  for (Dtype wide : {kBFloat16, kFloat16}) {
    std::vector<uint8_t> raw(2 * 65536);
    for (uint32_t v = 0; v < 65536; ++v) std::memcpy(&raw[2 * v], &v, 2);  // little-endian patterns
    Tensor all = empty({65536}, wide);
    std::memcpy(all.raw_data(), raw.data(), raw.size());
    const auto as_f32 = all.to(kFloat32).to_vector<float>();
    const auto e4 = codes_of(all.to(kFloat8E4M3));
    const auto e5 = codes_of(all.to(kFloat8E5M2));
    for (size_t i = 0; i < 65536 && bad < 20; ++i) {
      if (e4[i] != slow_e4m3().encode(as_f32[i], false) || e5[i] != slow_e5m2().encode(as_f32[i], false)) {
        ++bad;
        FAIL_CHECK(
            fmt::format("{} pattern {:#06x}: the tensor cast disagrees with the slow reference", dtype_name(wide), i));
      }
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("fp8: double and integer casts go through float, as PyTorch's") {
  const Tensor d = tensor(std::vector<double>{1.0 + 0x1p-4 + 0x1p-30, -300.0, 1e300, 7.0});
  // 1 + 2^-4 + 2^-30 rounds to float as 1.0625 exactly (a tie for E4M3's 3 bits: to the even 1.0).
  CHECK(codes_of(d.to(kFloat8E4M3)) == std::vector<uint8_t>{0x38, 0xf9, 0x7f, 0x4e});
  const Tensor i = tensor(std::vector<int64_t>{3, -17, 1000});
  const auto back = i.to(kFloat8E4M3).to(kFloat32).to_vector<float>();
  CHECK(back[0] == 3.0f);
  CHECK(back[1] == -16.0f);
  CHECK(std::isnan(back[2]));
  CHECK(i.to(kFloat8E5M2).to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{3, -16, 1024});
  CHECK(fp8_tensor({0x00, 0x38, 0x7f}, kFloat8E4M3).to(kBool).to_vector<bool>() ==
        std::vector<bool>{false, true, true});
  CHECK(full({3}, 2.5, kFloat8E5M2).to(kFloat32).to_vector<float>() == std::vector<float>{2.5f, 2.5f, 2.5f});
}

TEST_CASE("fp8: views, copies and printing") {
  const Tensor x = tensor(std::vector<float>{0.5f, -1.75f, 448.0f, 0.0f, 3.0f, 1e-3f}).reshape({2, 3});
  const Tensor e = x.to(kFloat8E4M3);
  CHECK(e.dtype() == kFloat8E4M3);
  CHECK(e.t().contiguous().to(kFloat32).to_vector<float>() ==
        x.t().contiguous().to(kFloat8E4M3).to(kFloat32).to_vector<float>());
  CHECK(e.slice(1, 1, 3).to(kFloat32).to_vector<float>() == std::vector<float>{-1.75f, 448.0f, 3.0f, 0.001953125f});
  CHECK(e.clone().dtype() == kFloat8E4M3);
  CHECK(e.select(0, 1).select(0, 1).item<float>() == 3.0f);
  const std::string s = fp8_tensor({0x30, 0x7e, 0x7f, 0xb8}, kFloat8E4M3).to_string();
  CHECK(s == "tensor([  0.5000, 448.0000,      nan,  -1.0000], dtype=float8_e4m3fn)");
  const std::string s5 = fp8_tensor({0x7c, 0xfc, 0x3c}, kFloat8E5M2).to_string();
  CHECK(s5 == "tensor([   inf,   -inf, 1.0000], dtype=float8_e5m2)");
}

TEST_CASE("fp8: safetensors F8_E4M3 / F8_E5M2 round trip, bit for bit") {
  const auto dir = hg::test::temp_dir("fp8_safetensors");
  std::vector<uint8_t> all(256);
  for (int c = 0; c < 256; ++c) all[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  StateDict sd{{"a", fp8_tensor(all, kFloat8E4M3).reshape({16, 16})}, {"b", fp8_tensor(all, kFloat8E5M2)}};
  const std::string path = (dir / "fp8.safetensors").string();
  save(sd, path);
  // The header names the dtypes as safetensors does.
  std::string bytes(static_cast<size_t>(std::filesystem::file_size(path)), '\0');
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    CHECK(std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
  }
  CHECK(bytes.find("\"F8_E4M3\"") != std::string::npos);
  CHECK(bytes.find("\"F8_E5M2\"") != std::string::npos);
  const StateDict back = load(path);
  CHECK(back.at("a").dtype() == kFloat8E4M3);
  CHECK(back.at("a").shape() == Shape{16, 16});
  CHECK(codes_of(back.at("a")) == all);
  CHECK(back.at("b").dtype() == kFloat8E5M2);
  CHECK(codes_of(back.at("b")) == all);
  std::filesystem::remove_all(dir);
}

TEST_CASE("fp8: arithmetic, reductions and GEMMs refuse the float8 dtypes by op and dtype name") {
  const Tensor a = ones({4, 4}).to(kFloat8E4M3);
  const Tensor b = ones({4, 4}).to(kFloat8E5M2);
  check_error([&] { (void)(a + a); }, {"add", "float8_e4m3fn", "to()"});
  check_error([&] { (void)(b * b); }, {"mul", "float8_e5m2"});
  check_error([&] { (void)(a + ones({4, 4})); }, {"float8_e4m3fn", "float32"});
  check_error([&] { (void)a.exp(); }, {"exp", "float8_e4m3fn"});
  check_error([&] { (void)relu(a); }, {"relu", "float8_e4m3fn"});
  check_error([&] { (void)a.sum(); }, {"sum", "float8_e4m3fn"});
  check_error([&] { (void)sum(ones({4, 4}), std::vector<int64_t>{0}, false, kFloat8E4M3); }, {"sum", "float8_e4m3fn"});
  check_error([&] { (void)a.max(); }, {"max", "float8_e4m3fn"});
  check_error([&] { (void)mm(a, a); }, {"mm", "float8_e4m3fn"});
  check_error([&] { (void)linear(b, b, Tensor()); }, {"linear", "float8_e5m2"});
  check_error([&] { (void)softmax(a, 1); }, {"softmax", "float8_e4m3fn"});
  check_error([&] { (void)cumsum(a, 0); }, {"cumsum", "float8_e4m3fn"});
  check_error([&] { (void)a.neg(); }, {"neg", "float8_e4m3fn"});
  check_error([&] { (void)clamp(a, 0.0, 1.0); }, {"clamp", "float8_e4m3fn"});
  check_error([&] { (void)layer_norm(a, {4}); }, {"layer_norm", "float8_e4m3fn"});
  check_error(
      [&] {
        Tensor c = a.clone();
        c.add_(c);
      },
      {"add_", "float8_e4m3fn"});
}

TEST_CASE("fp8: ops that only move values take the float8 dtypes") {
  const Tensor x = tensor(std::vector<float>{0.5f, -2.0f, 3.0f, 448.0f});
  const Tensor a = x.to(kFloat8E4M3);
  CHECK(codes_of(cat({a, a.flip({0})})) == codes_of(cat({x, x.flip({0})}).to(kFloat8E4M3)));
  CHECK(codes_of(index_select(a, 0, tensor(std::vector<int64_t>{3, 0}))) ==
        codes_of(tensor(std::vector<float>{448.0f, 0.5f}).to(kFloat8E4M3)));
  CHECK(codes_of(zeros({3}, kFloat8E5M2)) == std::vector<uint8_t>{0, 0, 0});
  // Creation ops draw or count in float32 and cast: the values are the casts of those.
  manual_seed(9);
  const Tensor drawn = randn({64}, kFloat8E4M3);
  manual_seed(9);
  CHECK(codes_of(drawn) == codes_of(randn({64}).to(kFloat8E4M3)));
  CHECK(arange(5.0, kFloat8E5M2).to(kFloat32).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
}
