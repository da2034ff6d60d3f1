// The autocast policy: what each op does with its inputs inside a region, per device type.
// The rows themselves are in policy_table.cpp, the one place that decides them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "framework/device.h"

namespace hg {
struct OpDef;
}

namespace hg::amp {

enum class CastPolicy : unsigned char {
  LowerPrecision,   // eligible inputs cast to the region's dtype (float16/bfloat16)
  Fp32,             // eligible inputs cast to float32
  Fp32OutputDtype,  // no input copy; the op writes float32 when its first input is eligible
  Promote,          // eligible inputs cast to the widest floating dtype among them
  Refused,          // throws, saying what to use instead
  PassThrough,      // "not listed": runs in whatever dtypes its inputs have
};

struct PolicyRow {
  std::string_view op;  // the public op name, as in hg::op_registry()
  CastPolicy cpu;
  CastPolicy cuda;
  std::string_view note;  // why, or for Refused rows the advice shown in the error
  CastPolicy on(DeviceType device) const { return device == kCUDA ? cuda : cpu; }
};

// Every row, in table order.
std::span<const PolicyRow> policy_table();
// The row for an op, or nullptr when the table has none.
const PolicyRow* find_policy_row(std::string_view op);
// The row of a registered op, bound to the OpDef on first use so later calls read a pointer
// (no name lookup per call). Throws hg::Error naming the op when the table has no row for it.
const PolicyRow& policy_row(const OpDef& op);
// What is wrong between the op registry and the table, one line each: an op without a row, a
// row that names no registered op. Empty when they match (a registry test checks it).
std::vector<std::string> policy_table_problems();
// The policy of `op` on `device`; throws hg::Error naming the op when it has no row (a new op
// is not finished until its row is decided).
CastPolicy policy_for(std::string_view op, DeviceType device);
std::string_view policy_name(CastPolicy policy);

}  // namespace hg::amp
