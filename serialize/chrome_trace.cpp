#include "serialize/chrome_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "serialize/file.h"

namespace hg {

namespace {

// Op names are C++ identifiers or demangled type names, but a custom function may name itself
// anything: quotes, backslashes and control characters are escaped.
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string dtype_list(const std::vector<Dtype>& dtypes) {
  std::string out = "[";
  for (size_t i = 0; i < dtypes.size(); ++i) out += (i ? ", " : "") + json_string(fmt::format("{}", dtypes[i]));
  return out + "]";
}

}  // namespace

std::string chrome_trace_json(const OpRecorder& recorder) {
  const auto& events = recorder.events();
  double origin = 0;
  if (!events.empty())
    origin = std::min_element(events.begin(), events.end(), [](const OpEvent& a, const OpEvent& b) {
               return a.start_micros < b.start_micros;
             })->start_micros;
  std::vector<std::string> lines;
  for (const OpEvent& e : events)
    lines.push_back(fmt::format(
        "{{\"name\": {}, \"cat\": \"{}\", \"ph\": \"X\", \"pid\": 0, \"tid\": {}, \"ts\": {:.3f}, \"dur\": {:.3f}, "
        "\"args\": {{\"device\": {}, \"inputs\": {}, \"outputs\": {}}}}}",
        json_string(e.name), e.backward ? "backward" : "forward", e.backward ? 1 : 0, e.start_micros - origin, e.micros,
        json_string(fmt::format("{}", e.device)), dtype_list(e.inputs), dtype_list(e.outputs)));
  for (const int tid : {0, 1})
    lines.push_back(fmt::format(
        "{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": {}, \"args\": {{\"name\": \"{}\"}}}}", tid,
        tid == 0 ? "forward" : "backward"));
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t i = 0; i < lines.size(); ++i) out += lines[i] + (i + 1 < lines.size() ? ",\n" : "\n");
  out += "]}\n";
  return out;
}

void write_chrome_trace(const OpRecorder& recorder, const std::string& path) {
  write_file_atomic(path, "chrome_trace", {chrome_trace_json(recorder)});
}

}  // namespace hg
