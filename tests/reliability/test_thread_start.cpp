// Threads that cannot start: a DataLoader's workers and the rendezvous store's server thread must
// fail with an hg::Error naming their owner, never let std::system_error escape. A forked child
// makes every thread creation fail with EAGAIN (a seccomp filter on clone/clone3, as a process
// limit would), which works as root too, where RLIMIT_NPROC is not enforced.
#include <doctest/doctest.h>

#if defined(__linux__) && defined(__x86_64__)
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>

#include "distributed/tcp_store.h"
#include "tests/cpu/helpers.h"

#ifndef __NR_clone3
#define __NR_clone3 435
#endif

using namespace hg;

namespace {

// From here on, clone and clone3 fail with EAGAIN in this process (the calling thread only has to
// exist; the child of fork has just the one).
bool forbid_new_threads() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAGAIN & SECCOMP_RET_DATA)),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// Runs `body` in a forked child that cannot start threads. The child's verdict comes back as its
// exit code: 0 an hg::Error whose message contains `expected`, 1 another message, 2 another
// exception, 3 no exception, 4 the filter could not be installed.
int run_without_threads(const std::function<void()>& body, const std::string& expected) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!forbid_new_threads()) _exit(4);
    int verdict = 3;
    try {
      body();
    } catch (const Error& e) {
      verdict = std::strstr(e.what(), expected.c_str()) != nullptr ? 0 : 1;
    } catch (...) {
      verdict = 2;
    }
    _exit(verdict);  // no atexit handlers, no leak check: the parent's state is not the child's to tear down
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("thread start: a DataLoader whose workers cannot start throws hg::Error naming the loader") {
  const auto ds = std::make_shared<data::TensorDataset>(TensorList{zeros({8, 2})});
  const int verdict = run_without_threads(
      [&] {
        data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
        for (const TensorList& batch : loader) (void)batch;
      },
      "[DataLoader] cannot start worker thread 1 of 2");
  CHECK(verdict == 0);
}

TEST_CASE("thread start: a rendezvous store whose server thread cannot start throws hg::Error") {
  const int verdict = run_without_threads([] { distributed::TcpStore store("127.0.0.1", 0, /*is_server=*/true, 5.0); },
                                          "[distributed] store");
  CHECK(verdict == 0);
}

TEST_CASE("thread start: the same calls with threads allowed succeed (the child's harness itself works)") {
  const auto ds = std::make_shared<data::TensorDataset>(TensorList{zeros({8, 2})});
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    try {
      data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 2});
      int batches = 0;
      for (const TensorList& batch : loader) batches += batch[0].size(0) == 2;
      distributed::TcpStore store("127.0.0.1", 0, /*is_server=*/true, 5.0);
      _exit(batches == 4 ? 0 : 1);
    } catch (...) {
      _exit(2);
    }
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

#else
TEST_CASE("thread start: needs Linux on x86-64 (seccomp filter)" * doctest::skip()) {}
#endif
