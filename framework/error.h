// hg::Error, the one exception type of the library, and the helpers that build its messages.
// Every message starts with "[op] " so a user knows which call failed.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace hg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(std::string_view op, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("[{}] {}", op, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace hg

// HG_CHECK(cond, "op", "message {}", arg): throws hg::Error("[op] message ...") when cond is false.
#define HG_CHECK(cond, op, ...)    \
  do {                             \
    if (!(cond)) [[unlikely]] {    \
      ::hg::fail(op, __VA_ARGS__); \
    }                              \
  } while (0)
