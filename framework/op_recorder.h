// hg::OpRecorder: records every op a thread runs, with dtypes and times (docs/AMP.md section 6),
// as PyTorch's profiler lists them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"

namespace hg {

struct OpEvent {
  std::string name;
  bool backward = false;  // run by the autograd engine
  Device device;
  std::vector<Dtype> inputs;
  std::vector<Dtype> outputs;
  // Wall time from the op's start (after autocast cast its inputs: those casts are events of
  // their own) to the end of its kernel, before its autograd node is recorded. An op that calls
  // other ops includes their time.
  double micros = 0;
  // When it started, in microseconds of the steady clock: the timeline of a Chrome trace
  // (serialize/chrome_trace.h). Only differences between events mean anything.
  double start_micros = 0;
};

// Records, while alive, every op run on this thread (nested recorders each see every op).
class OpRecorder {
 public:
  OpRecorder();
  ~OpRecorder();
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;
  const std::vector<OpEvent>& events() const { return events_; }
  void clear() { events_.clear(); }
  // Events with this name (e.g. count("to") after an autocast region).
  size_t count(std::string_view name, std::optional<bool> backward = std::nullopt) const;
  // The events summed per op name and pass (forward or backward), the largest total time first:
  // where a step's time goes, as PyTorch's profiler's key_averages() shows it.
  struct Total {
    std::string name;
    bool backward = false;
    size_t calls = 0;
    double micros = 0;
  };
  std::vector<Total> totals() const;

 private:
  friend class OpCall;
  std::vector<OpEvent> events_;
};

}  // namespace hg
