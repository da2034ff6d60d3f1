// Devices: a type (CPU or CUDA) and an index.
#pragma once

#include <cstdint>

#include <fmt/format.h>

namespace hg {

enum class DeviceType : uint8_t { CPU, CUDA };
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = kCPU;
  int index = 0;

  constexpr Device(DeviceType t = kCPU, int i = 0) : type(t), index(i) {}  // NOLINT: implicit on purpose
  constexpr bool is_cpu() const { return type == kCPU; }
  constexpr bool is_cuda() const { return type == kCUDA; }
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

}  // namespace hg

template <>
struct fmt::formatter<hg::DeviceType> : fmt::formatter<std::string_view> {
  auto format(hg::DeviceType t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(t == hg::kCPU ? "cpu" : "cuda", ctx);
  }
};
template <>
struct fmt::formatter<hg::Device> : fmt::formatter<std::string_view> {
  auto format(hg::Device d, format_context& ctx) const {
    if (d.is_cpu()) return fmt::formatter<std::string_view>::format("cpu", ctx);
    return fmt::format_to(ctx.out(), "cuda:{}", d.index);
  }
};
