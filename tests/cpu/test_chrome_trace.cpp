// The op recorder's Chrome trace: valid JSON in the Trace Event Format, one complete event per op
// with its pass, device, dtypes and times on one timeline (nested ops inside their caller).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "helpers.h"
#include "serialize/chrome_trace.h"

using namespace hg;

TEST_CASE("the op recorder writes a Chrome trace of a training step") {
  Tensor w = randn({4, 3}).requires_grad_();
  OpRecorder rec;
  const Tensor y = (linear(randn({2, 3}), w) * 2.0).sum();
  y.backward();
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(rec));
  const auto& events = trace.at("traceEvents");
  size_t forward = 0, backward = 0, linear_events = 0;
  for (const auto& e : events) {
    if (e.at("ph") == "M") continue;
    CHECK(e.at("ph") == "X");
    CHECK(e.at("ts").get<double>() >= 0.0);
    CHECK(e.at("dur").get<double>() >= 0.0);
    CHECK(e.at("args").at("device") == "cpu");
    (e.at("cat") == "backward" ? backward : forward) += 1;
    if (e.at("name") == "linear") {
      ++linear_events;
      CHECK(e.at("args").at("inputs").size() == 2);
      CHECK(e.at("args").at("outputs") == nlohmann::json::array({"float32"}));
    }
  }
  CHECK(forward + backward == rec.events().size());
  CHECK(backward == static_cast<size_t>(std::count_if(rec.events().begin(), rec.events().end(),
                                                      [](const OpEvent& e) { return e.backward; })));
  CHECK(backward > 0);
  CHECK(linear_events == 1);

  // Written atomically to a file; a path in a missing folder is an hg::Error naming the trace.
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("hg_trace_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "step.json").string();
  write_chrome_trace(rec, path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(nlohmann::json::parse(text.str()) == trace);
  std::filesystem::remove_all(dir);
  hg::test::check_error([&] { write_chrome_trace(rec, (dir / "missing" / "t.json").string()); }, {"[chrome_trace]"});
  // An empty recorder gives an empty timeline, still valid JSON.
  OpRecorder empty;
  empty.clear();
  CHECK(nlohmann::json::parse(chrome_trace_json(empty)).at("traceEvents").size() == 2);
}
