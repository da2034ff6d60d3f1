// Warnings PyTorch gives and halfgrad gives too, once per process: each case runs in a forked
// child (the parent never triggers them, so the child starts with the warning unsaid) with its
// stderr captured through a pipe.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "tests/cpu/helpers.h"

using namespace hg;

namespace {

// What `body` writes to stderr in a forked child ("exit N" appended when it does not exit 0).
std::string child_stderr(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    int code = 0;
    try {
      body();
    } catch (...) {
      code = 3;
    }
    _exit(code);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) out += "exit " + std::to_string(WEXITSTATUS(status));
  return out;
}

}  // namespace

TEST_CASE("warnings: a scheduler stepped before its optimizer warns once, as PyTorch") {
  const std::string wrong_order = child_stderr([] {
    Tensor w = ones({2}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.1});
    optim::StepLR sched(opt, 1, 0.5);
    sched.step();  // before opt.step(): warned
    sched.step();  // not again
  });
  CHECK(wrong_order.find("StepLR.step() was called before the optimizer's step()") != std::string::npos);
  CHECK(wrong_order.find("halfgrad warning") == wrong_order.rfind("halfgrad warning"));  // once
  const std::string right_order = child_stderr([] {
    Tensor w = ones({2}).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.1});
    optim::StepLR sched(opt, 1, 0.5);
    (w * 2.0).sum().backward();
    opt.step();
    sched.step();
  });
  CHECK(right_order.empty());
}

TEST_CASE("warnings: a one-layer LSTM/GRU/RNN with dropout warns once, as PyTorch") {
  const std::string out = child_stderr([] {
    nn::GRU a(3, 4, {.dropout = 0.2});
    nn::LSTM b(3, 4, {.dropout = 0.5});
    nn::RNN c(3, 4, {.num_layers = 2, .dropout = 0.5});  // two layers: fine
  });
  CHECK(out.find("GRU: dropout adds dropout after all but the last recurrent layer") != std::string::npos);
  CHECK(out.find("dropout=0.2 and num_layers=1") != std::string::npos);
  CHECK(out.find("halfgrad warning") == out.rfind("halfgrad warning"));  // once
}
