#include "framework/dtype.h"

#include "framework/error.h"
#include "framework/op.h"

namespace hg {

size_t element_size(Dtype dtype) {
  switch (dtype) {
    case kFloat64:
    case kInt64: return 8;
    case kFloat32:
    case kInt32: return 4;
    case kFloat16:
    case kBFloat16: return 2;
    case kUInt8:
    case kBool:
    case kFloat8E4M3:
    case kFloat8E5M2: return 1;
  }
  return 0;
}

std::string_view dtype_name(Dtype dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
    case kFloat64: return "float64";
    case kInt64: return "int64";
    case kInt32: return "int32";
    case kUInt8: return "uint8";
    case kBool: return "bool";
    case kFloat8E4M3: return "float8_e4m3fn";
    case kFloat8E5M2: return "float8_e5m2";
  }
  return "?";
}

bool is_floating(Dtype dtype) {
  return dtype == kFloat32 || dtype == kFloat16 || dtype == kBFloat16 || dtype == kFloat64 || is_float8(dtype);
}

namespace {
// Rank within a category; floats outrank integers, integers outrank bool.
int rank(Dtype d) {
  switch (d) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kInt32: return 2;
    case kInt64: return 3;
    case kFloat16:
    case kBFloat16: return 4;
    case kFloat32: return 5;
    case kFloat64: return 6;
    case kFloat8E4M3:
    case kFloat8E5M2: return 4;  // never compared: promote_types refuses them first
  }
  return 0;
}
}  // namespace

Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  if (is_float8(a) || is_float8(b)) {
    const std::string_view op = current_op_name();
    fail(op.empty() ? "promote_types" : op,
         "float8 dtypes do not promote with other dtypes ({} with {}): cast one with to() first", a, b);
  }
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace hg
