// CUDA graphs on any machine: the API's one-line refusal without a GPU, and every host wait a
// capture refuses by name, checked under a fake capture of the CPU device (capture_state.h).
#include <halfgrad.h>

#include <thread>

#include "framework/capture_state.h"
#include "framework/cuda_graph.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;

namespace {

const char* const kCaptureWords = "during a CUDA graph capture";

// The first line of an error (a refusal must be one line).
bool graph_error_one_line(const Error& e) { return std::string(e.what()).find('\n') == std::string::npos; }

}  // namespace

TEST_CASE("cuda::Graph without a usable GPU throws one line naming cuda::Graph") {
  if (cuda::is_available()) {
    MESSAGE("skipped: a GPU is available here (the cuda suite captures instead)");
    return;
  }
  cuda::Graph graph;
  bool ran = false;
  try {
    graph.capture([&] { ran = true; });
    FAIL_CHECK("expected an hg::Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).starts_with("[cuda::Graph] "));
    CHECK(graph_error_one_line(e));
  }
  CHECK_FALSE(ran);
  CHECK_FALSE(graph.captured());
  CHECK_FALSE(cuda::is_capturing());
  try {
    cuda::GraphCapture cap(graph);
    FAIL_CHECK("expected an hg::Error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).starts_with("[cuda::Graph] "));
  }
  // The failed attempts left no capture behind: the next refusal is the same one, not "already recording".
  check_error([&] { graph.capture_begin(); }, {"[cuda::Graph]"});
  CHECK_FALSE(cuda::is_capturing());
}

TEST_CASE("cuda::Graph refuses bad use on any machine") {
  cuda::Graph graph;
  check_error([&] { graph.replay(); }, {"[cuda::Graph]", "needs a captured graph"});
  check_error([&] { graph.capture_begin(Device(kCPU)); }, {"[cuda::Graph]", "captures CUDA work", "cpu"});
  check_error([&] { graph.capture_end(); }, {"[cuda::Graph]", "capture_end without capture_begin"});
  CHECK(graph.random_seeds() == 0);
  cuda::Graph moved = std::move(graph);
  check_error([&] { graph.capture_begin(); }, {"[cuda::Graph]", "moved from"});  // NOLINT(bugprone-use-after-move)
  CHECK_FALSE(moved.captured());
}

TEST_CASE("a capture refuses every host wait by the op's name") {
  const Tensor x = tensor(std::vector<float>{0.25f, 0.75f});
  const Tensor one = ones({1});
  capture::FakeCapture fake{Device(kCPU)};
  CHECK(cuda::is_capturing());
  auto refused = [](auto&& fn, const std::string& op) {
    try {
      fn();
      FAIL_CHECK("expected an hg::Error from " << op);
    } catch (const Error& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.starts_with("[" + op + "] cannot "), msg);
      CHECK_MESSAGE(msg.find(kCaptureWords) != std::string::npos, msg);
      CHECK(graph_error_one_line(e));
    }
  };
  refused([&] { (void)one.item<float>(); }, "item");
  refused([&] { (void)one.item<double>(); }, "item");
  refused([&] { (void)x.to(Device(kCUDA, 0)); }, "to");
  refused([&] { cuda::synchronize(); }, "cuda::synchronize");
  refused([&] { cuda::empty_cache(); }, "cuda::empty_cache");
  refused([&] { (void)one_hot(tensor(std::vector<int64_t>{0, 2})); }, "one_hot");
  refused([&] { (void)multinomial(x, 1); }, "multinomial");
  refused([&] { (void)binary_cross_entropy(x, x); }, "binary_cross_entropy");
  {
    Tensor p = ones({2}).requires_grad_();
    p.set_grad(full({2}, std::nan("")));
    refused([&] { (void)optim::clip_grad_norm_({p}, 1.0, 2.0, /*error_if_nonfinite=*/true); }, "clip_grad_norm_");
    // Without the host check the same call records nothing that waits.
    CHECK_NOTHROW((void)optim::clip_grad_norm_({p}, 1.0, 2.0, false));
  }
  {
    // A CPU flag is read on the host: refused; without a flag the step runs.
    Tensor p = ones({2}).requires_grad_();
    optim::SGD opt({p}, {.lr = 0.5});
    p.set_grad(ones({2}));
    refused([&] { opt.step(zeros({1})); }, "SGD");
    CHECK_NOTHROW(opt.step());
  }
  {
    // The per-parameter update passes the learning rate by value: a replay would freeze it.
    Tensor p = ones({2}).requires_grad_();
    optim::SGD opt({p}, {.lr = 0.5});
    opt.set_per_param(true);
    p.set_grad(ones({2}));
    check_error([&] { opt.step(); }, {"[SGD] cannot update parameter 0 on its own", kCaptureWords});
  }
  // Work that does not wait is recorded as usual.
  CHECK_NOTHROW((void)(x * 2.0 + x).sum());
}

TEST_CASE("host reads work again once the capture ends, and captures do not nest") {
  const Tensor one = ones({1});
  {
    capture::FakeCapture fake{Device(kCPU)};
    check_error([] { capture::FakeCapture inner{Device(kCPU)}; }, {"[cuda::Graph]", "already recording"});
  }
  CHECK_FALSE(cuda::is_capturing());
  CHECK(one.item<float>() == 1.0f);
  {
    // A capture of another device leaves this one's reads alone; device-wide waits still refuse.
    capture::FakeCapture other{Device(kCUDA, 0)};
    CHECK(one.item<float>() == 1.0f);
    check_error([] { cuda::synchronize(); }, {"[cuda::synchronize]", kCaptureWords, "cuda:0"});
  }
}

TEST_CASE("inside a capture the capturing thread's random draws are seed slots, the generator untouched") {
  manual_seed(7);
  const uint64_t first = random_u64(), second = random_u64();
  manual_seed(7);
  capture::begin(Device(kCPU), /*seed_slots=*/true);
  CHECK(random_u64() == 0);
  CHECK(random_u64() == 1);
  uint64_t other_thread = 0;
  std::thread t([&] { other_thread = random_u64(); });  // other threads draw values as usual
  t.join();
  CHECK(random_u64() == 2);
  CHECK(capture::end() == 3);
  CHECK(other_thread == first);
  CHECK(random_u64() == second);  // the slots took nothing from the generator
  // A capture that draws too many seeds is refused by name.
  capture::begin(Device(kCPU), true);
  for (int64_t i = 0; i < capture::kMaxSeedSlots; ++i) (void)random_u64();
  check_error([] { (void)random_u64(); }, {"[cuda::Graph]", "more than 4096 random seeds"});
  CHECK(capture::end() == capture::kMaxSeedSlots);
}

TEST_CASE("a capture refuses collectives by name (their Work finishes on the host)") {
  auto pg = distributed::ProcessGroup::init({.backend = distributed::Backend::Local});
  Tensor t = ones({4});
  Tensor out = zeros({4 * pg->world_size()});
  CHECK_NOTHROW(pg->all_reduce(t).wait());
  capture::FakeCapture fake{Device(kCPU)};
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"all_reduce", [&] { (void)pg->all_reduce(t); }},
      {"broadcast", [&] { (void)pg->broadcast(t); }},
      {"all_gather", [&] { (void)pg->all_gather(out, t); }},
      {"barrier", [&] { (void)pg->barrier(); }},
  };
  for (const auto& entry : calls) {  // no structured binding: CAPTURE's lambda captures the name
    const std::string& op = entry.first;
    CAPTURE(op);
    check_error(entry.second, {"[" + op + "] cannot run a collective", kCaptureWords, "docs/DISTRIBUTED.md"});
  }
}
